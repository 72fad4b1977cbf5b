/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.IndexReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.ReaderUtil;
import org.apache.lucene.index.VectorSimilarityFunction;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.KnnFloatVectorQuery;
import org.apache.lucene.search.MatchNoDocsQuery;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.QueryVisitor;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.ScoreMode;
import org.apache.lucene.search.Scorer;
import org.apache.lucene.search.Weight;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.search.join.DiversifyingChildrenFloatKnnVectorQuery;
import org.apache.lucene.util.BitSet;
import org.apache.lucene.util.FixedBitSet;
import org.opensearch.search.query.QueryPhase;

import java.io.IOException;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The candidate stage of SDR on one shard, as one query: for every source sentence a nested k-NN
 * search ({@link DiversifyingChildrenFloatKnnVectorQuery}: the top documents by their best sentence, as
 * the k-NN plugin's nested {@code knn} query on a Lucene-engine field runs it, with
 * {@code max(k, ef_search)} as Lucene's k), then the hits of all sentences aggregated per document
 * ({@link CandidateAggregator}). Its weight is that of the documents seen, scored by the aggregate
 * ({@link DocScoresQuery}), computed when the query phase builds it (so that a cancelled or timed-out search
 * stops it: {@link ShardGuard}), so the search's {@code size} takes the top and a {@code rescore} can score
 * them exactly in the same request.
 *
 * <p>The probes run on this thread and the plugin's pool ({@link SdrThreads}); the aggregation adds
 * the rows in source order, so the result does not depend on the threads. A plain probe (search
 * {@code sentences}, no filter) walks Lucene's graphs with the plugin's SIMD dot product where Lucene
 * has none ({@link GraphProbe}).
 */
final class SdrCandidatesQuery extends Query {
    private final String field;
    private final SdrSource source;
    private final boolean statistics;
    private final int k;
    private final int efSearch;
    private final CandidateAggregator.Method aggregation;
    private final Query childFilter;      // null: every sentence
    private final Query excluded;         // parent documents dropped after the k-NN (null: none)
    private final int excludedCount;      // asked for on top of k when there is no filter
    private final BitSetProducer parents;
    private final int oversample;         // 0: nested k-NN of documents; else sentences: k x oversample sentence hits

    SdrCandidatesQuery(String field, SdrSource source, boolean statistics, int k, int efSearch,
                       CandidateAggregator.Method aggregation, Query childFilter, Query excluded, int excludedCount,
                       BitSetProducer parents) {
        this(field, source, statistics, k, efSearch, aggregation, childFilter, excluded, excludedCount, parents, 0);
    }

    /**
     * @param oversample 0: per source sentence the nested k-NN of documents (diversified: Lucene keeps the best
     *                   sentence of {@code max(k, ef_search)} distinct documents), as the k-NN plugin's nested query;
     *                   n &gt; 0: the plain k-NN of {@code max(k * n, ef_search)} sentences, each document kept once (its
     *                   best sentence), the first {@code k} documents: the embedded store's nested k-NN
     *                   ({@code SDR_STORE_KNN_OVERSAMPLE}), which explores far less of the graph
     */
    SdrCandidatesQuery(String field, SdrSource source, boolean statistics, int k, int efSearch,
                       CandidateAggregator.Method aggregation, Query childFilter, Query excluded, int excludedCount,
                       BitSetProducer parents, int oversample) {
        this.field = field;
        this.source = source;
        this.statistics = statistics;
        this.k = k;
        this.efSearch = efSearch;
        this.aggregation = aggregation;
        this.childFilter = childFilter;
        this.excluded = excluded;
        this.excludedCount = excludedCount;
        this.parents = parents;
        this.oversample = oversample;
    }

    /** The similarity of the field's vectors in {@code reader}, or null when no segment has one (refuses another dimension). */
    private VectorSimilarityFunction similarity(IndexReader reader) {
        for (LeafReaderContext leaf : reader.leaves()) {
            FieldInfo info = leaf.reader().getFieldInfos().fieldInfo(field);
            if (info != null && info.getVectorDimension() > 0) {
                if (info.getVectorDimension() != source.dim()) {
                    throw new IllegalArgumentException("[" + SdrCandidatesQueryBuilder.NAME + "] the source vectors have "
                        + source.dim() + " dimensions but field [" + field + "] has " + info.getVectorDimension());
                }
                return info.getVectorSimilarityFunction();
            }
        }
        return null;
    }

    @Override
    public Query rewrite(IndexSearcher searcher) throws IOException {
        if (similarity(searcher.getIndexReader()) == null) {
            return new MatchNoDocsQuery("no vector of [" + field + "] in this shard");
        }
        return this;  // the work runs when the query phase builds the weight (createWeight), where it can be cancelled
    }

    /**
     * The candidates of this shard, computed once (the query phase, an explanation, ... ask for the same weight):
     * OpenSearch's query phase builds the weight inside its search, after its time-out and cancellation are set
     * up ({@link ShardGuard}), so the probes stop when the search is cancelled, and at its time-out the shard
     * answers no candidate and {@code timed_out: true}.
     */
    @Override
    public Weight createWeight(IndexSearcher searcher, ScoreMode scoreMode, float boost) throws IOException {
        return scores(searcher).createWeight(searcher, scoreMode, boost);
    }

    private DocScoresQuery computed;

    private synchronized DocScoresQuery scores(IndexSearcher searcher) throws IOException {
        IndexReader reader = searcher.getIndexReader();
        Object key = reader.getContext().id();
        if (computed == null || computed.readerKey() != key) {
            computed = compute(reader, ShardGuard.of(searcher));
        }
        return computed;
    }

    /** Bytes one candidate hit of a probe holds until the aggregation (its document and its cosine). */
    static final long BYTES_PER_HIT = 8;
    /** Bytes the aggregator holds per document seen (its slot in the map, sums; more per paragraph for sdr-bound). */
    static final long BYTES_PER_DOCUMENT = 64;

    private DocScoresQuery compute(IndexReader reader, ShardGuard guard) throws IOException {
        VectorSimilarityFunction similarity = similarity(reader);
        if (similarity == null) {
            return new DocScoresQuery(DocScores.of(new int[0], new double[0], 0), reader.getContext().id(),
                "sdr_candidates: no vector of [" + field + "] in this shard");
        }
        IndexSearcher probe = new IndexSearcher(reader);
        probe.setQueryCache(null);
        FixedBitSet drop;
        try {
            drop = excluded == null ? null : matching(probe, excluded, reader.maxDoc());
        } catch (QueryPhase.TimeExceededException e) {  // OpenSearch's reader checks its time-out too (terms of a filter)
            return timedOut(reader, guard);
        }
        int asked = k + (childFilter == null && drop != null ? excludedCount : 0);
        int luceneK = oversample > 0 ? Math.max(k * oversample, efSearch) : Math.max(asked, efSearch);
        int rows = source.sentences();
        // what the probes keep (rows x k hits) and the aggregator's tables (one slot per document seen) live until the
        // query phase ends
        long perRow = Math.min(k, Math.max(1, reader.maxDoc()));
        long documents = Math.min((long) rows * perRow, reader.maxDoc());
        long perDocument = BYTES_PER_DOCUMENT + (aggregation == CandidateAggregator.Method.SDR_BOUND ? 8L * source.paragraphs() : 0);
        guard.reserve(rows * perRow * BYTES_PER_HIT + documents * perDocument, "<sdr_candidates hits>");
        int[][] hitDocs = new int[rows][];
        float[][] hitCos = new float[rows][];
        VectorSimilarityFunction function = similarity;
        List<LeafReaderContext> leaves = reader.leaves();
        BitSet[] parentBits = new BitSet[leaves.size()];
        for (int l = 0; l < leaves.size(); l++) {
            parentBits[l] = parents.getBitSet(leaves.get(l));
        }
        // the plain k-NN without a filter can walk the graphs with the plugin's SIMD dot product (GraphProbe)
        boolean graphSearch = oversample > 0 && childFilter == null && GraphProbe.wanted(similarity);
        AtomicBoolean timedOut = new AtomicBoolean();
        SdrThreads.Range probes = (from, to) -> {
            GraphProbe graph = graphSearch ? GraphProbe.open(leaves, field, function) : null;
            for (int row = from; row < to; row++) {
                guard.checkCancelled();  // each probe is one bounded k-NN search: stop between two
                if (timedOut.get() || guard.timedOut()) {
                    timedOut.set(true);
                    return;
                }
                ScoreDoc[] hits;
                if (graph != null) {
                    hits = graph.search(source.vector(row), luceneK);
                } else {
                    Query knn = oversample > 0 ? new KnnFloatVectorQuery(field, source.vector(row), luceneK, childFilter)
                        : new DiversifyingChildrenFloatKnnVectorQuery(field, source.vector(row), childFilter, luceneK, parents);
                    hits = probe.search(knn, luceneK).scoreDocs;
                }
                int[] docs = new int[k];
                float[] cos = new float[k];
                int n = 0;
                for (ScoreDoc hit : hits) {
                    if (n == k) {
                        break;
                    }
                    // the hit is the document's best sentence (a child): its parent follows it in the block
                    int l = ReaderUtil.subIndex(hit.doc, leaves);
                    LeafReaderContext leaf = leaves.get(l);
                    if (parentBits[l] == null) {
                        continue;
                    }
                    int parent = parentBits[l].nextSetBit(hit.doc - leaf.docBase) + leaf.docBase;
                    if (drop != null && drop.get(parent)) {
                        continue;
                    }
                    if (oversample > 0 && seen(docs, n, parent)) {
                        continue;  // a sentence of a document already kept (hits come best first)
                    }
                    docs[n] = parent;
                    cos[n] = cosine(function, hit.score);
                    n++;
                }
                hitDocs[row] = n == k ? docs : java.util.Arrays.copyOf(docs, n);
                hitCos[row] = n == k ? cos : java.util.Arrays.copyOf(cos, n);
            }
        };
        try {
            SdrThreads.run(rows, 4, SdrThreads.executor(), SdrThreads.threads(), "searching SDR candidates", probes);
        } catch (QueryPhase.TimeExceededException e) {
            // the search's reader checks OpenSearch's time-out as it reads (the terms of a filter or of the excluded
            // ids): the same time-out as the plugin's own check
            timedOut.set(true);
        }
        if (timedOut.get()) {  // the shard's answer would rest on some of the sentences only: none, and timed_out
            return timedOut(reader, guard);
        }
        CandidateAggregator aggregator = new CandidateAggregator(aggregation, source, statistics);
        for (int row = 0; row < rows; row++) {
            if ((row & 255) == 0) {
                guard.checkCancelled();
            }
            aggregator.add(row, hitDocs[row], hitCos[row], hitDocs[row].length);
        }
        int count = aggregator.size();
        int[] docs = new int[count];
        double[] scores = new double[count];
        aggregator.result(docs, scores);
        return new DocScoresQuery(DocScores.of(docs, scores, count), reader.getContext().id(),
            "sdr_candidates: " + aggregation.label() + " of the nested k-NN hits of " + rows + " source sentences");
    }

    /** No candidate, and the shard's search marked as timed out. */
    private static DocScoresQuery timedOut(IndexReader reader, ShardGuard guard) {
        guard.markTimedOut();
        return new DocScoresQuery(DocScores.of(new int[0], new double[0], 0), reader.getContext().id(), "sdr_candidates: timed out");
    }

    private static boolean seen(int[] docs, int n, int doc) {
        for (int i = 0; i < n; i++) {
            if (docs[i] == doc) {
                return true;
            }
        }
        return false;
    }

    /** The cosine of unit vectors from a Lucene vector score (the inverse of the field's similarity's scaling). */
    static float cosine(VectorSimilarityFunction function, float score) {
        switch (function) {
            case MAXIMUM_INNER_PRODUCT:
                return score >= 1f ? score - 1f : 1f - 1f / score;
            case DOT_PRODUCT:
            case COSINE:
                return 2f * score - 1f;
            case EUCLIDEAN:
                return 1f - (1f / score - 1f) / 2f;  // |x - y|^2 = 2 - 2 cos for unit vectors
            default:
                throw new IllegalArgumentException("[" + SdrCandidatesQueryBuilder.NAME + "] unsupported similarity " + function);
        }
    }

    private static FixedBitSet matching(IndexSearcher searcher, Query query, int maxDoc) throws IOException {
        FixedBitSet bits = new FixedBitSet(Math.max(1, maxDoc));
        Weight weight = searcher.createWeight(searcher.rewrite(query), ScoreMode.COMPLETE_NO_SCORES, 1f);
        for (LeafReaderContext leaf : searcher.getIndexReader().leaves()) {
            Scorer scorer = weight.scorer(leaf);
            if (scorer == null) {
                continue;
            }
            DocIdSetIterator it = scorer.iterator();
            for (int doc = it.nextDoc(); doc != DocIdSetIterator.NO_MORE_DOCS; doc = it.nextDoc()) {
                bits.set(leaf.docBase + doc);
            }
        }
        return bits;
    }

    @Override
    public String toString(String f) {
        return SdrCandidatesQueryBuilder.NAME + "(" + field + ", " + source.sentences() + " sentences, k=" + k + ", ef_search="
            + efSearch + (oversample > 0 ? ", sentences x" + oversample : "") + ", " + aggregation.label() + (childFilter == null ? "" : ", filter=" + childFilter) + ")";
    }

    @Override
    public void visit(QueryVisitor visitor) {
        visitor.visitLeaf(this);
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (o == null || getClass() != o.getClass()) {
            return false;
        }
        SdrCandidatesQuery other = (SdrCandidatesQuery) o;
        return field.equals(other.field) && source.equals(other.source) && statistics == other.statistics && k == other.k
            && efSearch == other.efSearch && aggregation == other.aggregation && Objects.equals(childFilter, other.childFilter)
            && Objects.equals(excluded, other.excluded) && excludedCount == other.excludedCount && parents.equals(other.parents)
            && oversample == other.oversample;
    }

    @Override
    public int hashCode() {
        return Objects.hash(field, source, statistics, k, efSearch, aggregation, childFilter, excluded, excludedCount, oversample);
    }
}
