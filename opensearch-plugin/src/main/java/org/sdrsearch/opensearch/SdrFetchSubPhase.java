/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.StoredFields;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.util.VectorUtil;
import org.opensearch.common.document.DocumentField;
import org.opensearch.common.lucene.search.Queries;
import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.common.xcontent.support.XContentMapValues;
import org.opensearch.core.common.bytes.BytesReference;
import org.opensearch.index.fieldvisitor.FieldsVisitor;
import org.opensearch.index.mapper.MappedFieldType;
import org.opensearch.index.query.QueryShardContext;
import org.opensearch.search.fetch.FetchContext;
import org.opensearch.search.fetch.FetchSubPhase;
import org.opensearch.search.fetch.FetchSubPhaseProcessor;
import org.opensearch.search.rescore.RescoreContext;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Per-hit fields, each read from the hit's nested sentences in the fetch phase (which visits hits
 * in doc-id order), so they cost one more read of the returned hits only:
 * <ul>
 *   <li>{@code _sdr}, with {@code "explain": true} in the {@code sdr} rescore clause: the hit's SDR score
 *       and, per source paragraph, the best candidate paragraph with P_ij, N_ij and the best sentence
 *       pairs (README.md, "Response"); with {@code "explain_top": n} instead, only on the hits the rescore
 *       explained (each shard's best n); and with {@code "explain_source": [fields]} each explained hit also
 *       carries {@code _sdr_source}, its {@code _source} filtered to those fields;</li>
 *   <li>{@code _sdr_vectors}, with {@code "ext": {"sdr_vectors": {}}}: the hit's sentence vectors
 *       ({@link SdrVectorsExt}).</li>
 * </ul>
 */
final class SdrFetchSubPhase implements FetchSubPhase {
    static final String FIELD = "_sdr";
    static final String VECTORS_FIELD = "_sdr_vectors";
    static final String SOURCE_FIELD = "_sdr_source";

    @Override
    public FetchSubPhaseProcessor getProcessor(FetchContext fetchContext) {
        SdrRescoreContext found = null;
        if (fetchContext.rescore() != null) {
            for (RescoreContext rescore : fetchContext.rescore()) {
                if (rescore instanceof SdrRescoreContext && ((SdrRescoreContext) rescore).request().explainsAny()) {
                    found = (SdrRescoreContext) rescore;  // the last sdr clause that asks for it
                }
            }
        }
        SdrVectorsExt vectors = (SdrVectorsExt) fetchContext.getSearchExt(SdrVectorsExt.NAME);
        if (found == null && vectors == null) {
            return null;
        }
        ShardGuard guard = ShardGuard.of(fetchContext.searcher());
        int hits = guard.hitsToFetch();
        if (vectors != null) {
            int dim = checkVectorsField(fetchContext.getQueryShardContext(), vectors.field());
            if (dim > 0 && vectors.centroids() != null) {
                checkCentroids(vectors, dim, hits);
            } else if (dim > 0 && vectors.mean() && hits > 0) {
                SdrLimits.checkFetchValues("[mean]", (long) hits * dim, hits);
            }
        }
        if (found != null && found.request().explain() && hits > 0) {
            // hits the rescore did not explain (a fetch run apart from the query phase) are explained here
            SdrLimits.checkExplainPairs(SdrRescorerBuilder.EXPLAIN, hits, found.request().source().sentences());
        }
        FetchSubPhaseProcessor explain = found == null ? null : explainProcessor(found, guard);
        FetchSubPhaseProcessor read = vectors == null ? null
            : vectorsProcessor(vectors, fetchContext.getQueryShardContext().bitsetFilter(Queries.newNonNestedFilter()), guard);
        return new FetchSubPhaseProcessor() {
            @Override
            public void setNextReader(LeafReaderContext readerContext) throws IOException {
                if (explain != null) {
                    explain.setNextReader(readerContext);
                }
                if (read != null) {
                    read.setNextReader(readerContext);
                }
            }

            @Override
            public void process(HitContext hitContext) throws IOException {
                if (explain != null) {
                    explain.process(hitContext);
                }
                if (read != null) {
                    read.process(hitContext);
                }
            }
        };
    }

    /**
     * Refuses (a 400, as the rescorer and sdr_candidates do) an {@code sdr_vectors} field that the index's
     * mapping lacks or that is not a knn_vector, rather than answering "no sentences" for every hit. A field
     * in the mapping but absent from a segment (no document of it has a vector) still reads as no sentences.
     */
    static int checkVectorsField(QueryShardContext context, String field) {
        MappedFieldType type = context.fieldMapper(field);
        if (type == null) {
            throw new IllegalArgumentException("[" + SdrVectorsExt.NAME + "] field [" + field + "] is not in the mapping of index ["
                + context.index().getName() + "]");
        }
        if ("knn_vector".equals(type.typeName()) == false) {
            throw new IllegalArgumentException("[" + SdrVectorsExt.NAME + "] field [" + field + "] is of type [" + type.typeName()
                + "], not knn_vector");
        }
        Map<String, Object> mapping = SdrRescorerBuilder.mappingOf(context, field);
        Object dimension = mapping == null ? null : mapping.get("dimension");
        try {
            return dimension == null ? -1 : Integer.parseInt(String.valueOf(dimension));
        } catch (NumberFormatException e) {
            return -1;
        }
    }

    /**
     * Refuses (a 400 naming the setting) centroids of more rows than a source may have, or whose rows over the
     * {@code hits} of this fetch (when known) pass {@code sdr.limits.max_fetch_values}.
     */
    static void checkCentroids(SdrVectorsExt ext, int dim, int hits) {
        if (ext.centroids().length % dim != 0) {
            throw new IllegalArgumentException("[" + SdrVectorsExt.NAME + "] [centroids] has " + ext.centroids().length
                + " values, not a whole number of rows of the " + dim + " dimensions of field [" + ext.field() + "]");
        }
        int rows = ext.centroids().length / dim;
        try {
            SdrLimits.checkSourceSentences("centroids", rows);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("[" + SdrVectorsExt.NAME + "] " + e.getMessage(), e);
        }
        if (hits > 1) {
            SdrLimits.checkFetchValues("[centroids] of " + rows + " rows", (long) hits * rows, hits);
        }
    }

    private static FetchSubPhaseProcessor explainProcessor(SdrRescoreContext context, ShardGuard guard) {
        ShardGuard.Charges kept = guard.contextCharges("<sdr explain>");
        return new FetchSubPhaseProcessor() {
            private CandidateReader reader;
            private final CandidateSentences candidate = new CandidateSentences(context.request().source().dim());
            private final SdrScorer scorer = new SdrScorer(context.request().source());
            private LeafReaderContext leaf;
            private int last = -1;
            private final String[] sourceFields = context.request().explainSource();
            private final String[] noVectors = { context.request().field() };
            private StoredFields stored;

            @Override
            public void setNextReader(LeafReaderContext readerContext) throws IOException {
                leaf = readerContext;
                reader = context.reader(readerContext);
                stored = sourceFields.length == 0 ? null : readerContext.reader().storedFields();
                last = -1;
            }

            /**
             * The hit's {@code _source} filtered to {@code explain_source}, the vector field excluded by name: the
             * k-NN plugin's derived source (3.x) then rebuilds no vector into it. Empty when it has none.
             */
            private Map<String, Object> source(int doc) throws IOException {
                FieldsVisitor visitor = new FieldsVisitor(true, sourceFields, noVectors);
                stored.document(doc, visitor);
                BytesReference bytes = visitor.source();
                if (bytes == null) {
                    return Collections.emptyMap();
                }
                kept.add(4L * bytes.length());
                return XContentMapValues.filter(XContentHelper.convertToMap(bytes, false).v2(), sourceFields, noVectors);
            }

            @Override
            public void process(HitContext hitContext) throws IOException {
                guard.checkCancelled();
                int doc = hitContext.docId();
                Map<String, Object> breakdown = context.takeExplained(leaf.docBase + doc);  // computed by the rescore
                if (breakdown == null && context.request().explain() == false) {
                    return;  // explain_top: a hit below this shard's best (or one the rescore window did not reach)
                }
                if (breakdown == null) {
                    if (doc <= last) {  // not in doc-id order: start this segment's iterators again
                        reader = context.reader(leaf);
                    }
                    last = doc;
                    reader.read(doc, candidate);
                    kept.add(SdrRescorer.breakdownBytes(context.request().source()));
                    breakdown = scorer.explain(candidate);
                }
                hitContext.hit().setDocumentField(FIELD, new DocumentField(FIELD, Collections.singletonList(breakdown)));
                if (stored != null) {
                    hitContext.hit().setDocumentField(SOURCE_FIELD, new DocumentField(SOURCE_FIELD,
                        Collections.singletonList(source(doc))));
                }
            }
        };
    }

    /** Bytes one returned float value holds until the response is sent (its float32, its base64 text, the buffers). */
    static final long BYTES_PER_VALUE = 12;

    private static FetchSubPhaseProcessor vectorsProcessor(SdrVectorsExt ext, BitSetProducer parents, ShardGuard guard) {
        ShardGuard.Charges returned = guard.contextCharges("<sdr_vectors>");
        return new FetchSubPhaseProcessor() {
            private long values;   // float values returned so far by this fetch
            private int hits;      // hits processed so far
            private CandidateReader reader;
            private CandidateSentences candidate;
            private LeafReaderContext leaf;
            private int dim;
            private int last = -1;
            private CentroidMatcher matcher;  // the source's centroids, split once at this dimension
            private StoredCentroids stored;   // this segment's centroids written at index time (null: none)

            private CentroidMatcher matcher() {
                if (matcher == null || matcher.rows() != ext.centroids().length / dim) {
                    float[] flat = ext.centroids();
                    float[][] rows = new float[flat.length / dim][];
                    for (int i = 0; i < rows.length; i++) {
                        rows[i] = Arrays.copyOfRange(flat, i * dim, (i + 1) * dim);
                    }
                    matcher = new CentroidMatcher(rows);
                }
                return matcher;
            }

            @Override
            public void setNextReader(LeafReaderContext readerContext) throws IOException {
                leaf = readerContext;
                FieldInfo info = readerContext.reader().getFieldInfos().fieldInfo(ext.field());
                dim = info == null ? 0 : info.getVectorDimension();
                if (dim > 0 && ext.centroids() != null) {
                    checkCentroids(ext, dim, -1);
                }
                reader = dim == 0 ? null : open();
                last = -1;
            }

            private CandidateReader open() throws IOException {
                if (candidate == null || candidate.dim() != dim) {
                    candidate = new CandidateSentences(dim);
                }
                stored = ext.centroids() == null ? null : StoredCentroids.open(leaf.reader(), dim);
                return new CandidateReader(leaf, parents, ext.field(), ext.paragraphField(), ext.positionField(), dim);
            }

            @Override
            public void process(HitContext hitContext) throws IOException {
                guard.checkCancelled();
                int doc = hitContext.docId();
                Map<String, Object> out;
                if (reader == null) {
                    out = ext.centroids() != null ? rowsOf(null, 0, null) : ext.mean() ? encodeMean(null, 0) : encode(null, 0);
                } else {
                    if (doc <= last) {
                        reader = open();
                    }
                    last = doc;
                    // the centroids written at index time when the document has them (its sentences only counted), else its sentences
                    float[][] centroids = stored == null ? null : stored.read(doc);
                    int sentences = reader.read(doc, centroids == null ? candidate : null);
                    long own = ext.centroids() != null ? ext.centroids().length / dim : ext.mean() ? dim : (long) candidate.size() * dim;
                    // one hit alone is always returned (the index's nested-objects limit bounds it); more, within the limit
                    if (hits > 0) {
                        SdrLimits.checkFetchValues(ext.centroids() != null ? "[centroids]" : ext.mean() ? "[mean]" : "the vectors",
                            values + own, hits + 1L);
                    }
                    returned.add(own * BYTES_PER_VALUE);
                    values += own;
                    out = ext.centroids() != null
                        ? rowsOf(centroids != null ? centroids : paragraphCentroids(candidate, dim), sentences, matcher())
                        : ext.mean() ? encodeMean(candidate, dim) : encode(candidate, dim);
                }
                hits++;
                hitContext.hit().setDocumentField(VECTORS_FIELD, new DocumentField(VECTORS_FIELD, Collections.singletonList(out)));
            }
        };
    }

    /**
     * For each of the source's paragraph centroids ({@code rows}, of {@code dim}) its best cosine with
     * the paragraph centroids of {@code c} (each paragraph's normalised mean sentence vector: float32 sums and
     * norm, as the Python pre-rank's {@code paragraph_centroids}), as base64 float32, with the sentence and
     * paragraph counts; {@code "centroid_rows": null} for no sentence. The sums are plain float loops (the JIT
     * vectorises them), the norms {@link VectorDot}'s SIMD dot product where the JVM has it (with double sums
     * and a scalar norm this took 15 % of a node's samples on IRLeD's 200-document pools), the cosines
     * {@link CentroidMatcher}'s kernel.
     */
    static Map<String, Object> centroidRows(CandidateSentences c, int dim, float[][] rows) {
        int m = c == null ? 0 : c.size();
        return m == 0 ? rowsOf(null, 0, null) : rowsOf(paragraphCentroids(c, dim), m, new CentroidMatcher(rows));
    }

    /**
     * The centroid rows of a candidate of {@code sentences} sentences whose paragraph centroids are {@code own}
     * (computed, {@link #paragraphCentroids}, or stored at index time, {@link StoredCentroids}); {@code own} null
     * or {@code sentences} 0: the answer for a candidate without sentences.
     */
    static Map<String, Object> rowsOf(float[][] own, int sentences, CentroidMatcher matcher) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sentences", sentences);
        out.put("paragraphs", own == null || sentences == 0 ? 0 : own.length);
        if (own == null || sentences == 0 || own.length == 0) {
            out.put("centroid_rows", null);
            return out;
        }
        float[] best = matcher.best(own);
        ByteBuffer buffer = ByteBuffer.allocate(matcher.rows() * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < matcher.rows(); i++) {
            buffer.putFloat(best[i]);
        }
        out.put("centroid_rows", Base64.getEncoder().encodeToString(buffer.array()));
        return out;
    }

    /** {@code c}'s paragraph centroids, in paragraph order: each paragraph's normalised mean (none for no sentence). */
    static float[][] paragraphCentroids(CandidateSentences c, int dim) {
        int m = c.size();
        long[] keys = new long[m];
        for (int r = 0; r < m; r++) {
            keys[r] = c.paragraph(r);
        }
        Arrays.sort(keys);
        int paragraphs = 0;
        for (int r = 0; r < m; r++) {
            if (r == 0 || keys[r] != keys[r - 1]) {
                keys[paragraphs++] = keys[r];
            }
        }
        float[][] own = new float[paragraphs][dim];
        for (int r = 0; r < m; r++) {
            float[] sum = own[Arrays.binarySearch(keys, 0, paragraphs, c.paragraph(r))];
            float[] v = c.vector(r);
            for (int x = 0; x < dim; x++) {
                sum[x] += v[x];
            }
        }
        VectorDot simd = VectorDot.simd();  // Lucene 9's own dot product is scalar on Java 17
        for (float[] sum : own) {
            float norm = Math.max((float) Math.sqrt(simd != null ? simd.dot(sum, sum) : VectorUtil.dotProduct(sum, sum)), 1e-12f);
            for (int x = 0; x < dim; x++) {
                sum[x] /= norm;
            }
        }
        return own;
    }

    /**
     * The normalised mean of {@code c}'s sentence vectors (sums in double; zero vector for no sentence)
     * as base64 float32, with the sentence and paragraph counts.
     */
    static Map<String, Object> encodeMean(CandidateSentences c, int dim) {
        int m = c == null ? 0 : c.size();
        double[] sum = new double[dim];
        java.util.Set<Long> paragraphs = new java.util.HashSet<>();
        for (int r = 0; r < m; r++) {
            float[] v = c.vector(r);
            for (int x = 0; x < dim; x++) {
                sum[x] += v[x];
            }
            paragraphs.add(c.paragraph(r));
        }
        ByteBuffer buffer = ByteBuffer.allocate(dim * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : normalised(sum)) {
            buffer.putFloat(v);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sentences", m);
        out.put("dim", dim);
        out.put("paragraphs", paragraphs.size());
        out.put("mean", Base64.getEncoder().encodeToString(buffer.array()));
        return out;
    }

    /** {@code sum / max(|sum|, 1e-12)} in float32 (a zero vector stays zero): a mean sentence vector, normalised. */
    static float[] normalised(double[] sum) {
        double norm = 0;
        for (double v : sum) {
            norm += v * v;
        }
        norm = Math.max(Math.sqrt(norm), 1e-12);
        float[] unit = new float[sum.length];
        for (int x = 0; x < sum.length; x++) {
            unit[x] = (float) (sum[x] / norm);
        }
        return unit;
    }

    /** The sentences of {@code c} in (paragraph, position, read) order: base64 float32 rows and paragraph sizes. */
    static Map<String, Object> encode(CandidateSentences c, int dim) {
        int m = c == null ? 0 : c.size();
        Integer[] order = new Integer[m];
        for (int r = 0; r < m; r++) {
            order[r] = r;
        }
        Arrays.sort(order, (a, b) -> {
            int cmp = Long.compare(c.paragraph(a), c.paragraph(b));
            if (cmp != 0) {
                return cmp;
            }
            cmp = Long.compare(c.position(a), c.position(b));
            return cmp != 0 ? cmp : Integer.compare(a, b);
        });
        ByteBuffer buffer = ByteBuffer.allocate(m * dim * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        List<Integer> sizes = new ArrayList<>();
        for (int t = 0; t < m; t++) {
            int r = order[t];
            if (t == 0 || c.paragraph(r) != c.paragraph(order[t - 1])) {
                sizes.add(0);
            }
            sizes.set(sizes.size() - 1, sizes.get(sizes.size() - 1) + 1);
            buffer.asFloatBuffer().position(t * dim).put(c.vector(r), 0, dim);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sentences", m);
        out.put("dim", dim);
        out.put("paragraph_sizes", sizes);
        out.put("vectors", Base64.getEncoder().encodeToString(buffer.array()));
        return out;
    }
}
