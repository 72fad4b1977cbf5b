/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.apache.lucene.codecs.KnnVectorsReader;
import org.apache.lucene.codecs.hnsw.HnswGraphProvider;
import org.apache.lucene.codecs.perfield.PerFieldKnnVectorsFormat;
import org.apache.lucene.index.CodecReader;
import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.FilterLeafReader;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.VectorSimilarityFunction;
import org.apache.lucene.search.KnnCollector;
import org.apache.lucene.search.KnnFloatVectorQuery;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopKnnCollector;
import org.apache.lucene.search.knn.MultiLeafKnnCollector;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.VectorUtil;
import org.apache.lucene.util.hnsw.BlockingFloatHeap;
import org.apache.lucene.util.hnsw.HnswGraphSearcher;
import org.apache.lucene.util.hnsw.RandomVectorScorer;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The plain k-NN of one query vector over a shard's sentences, as {@link KnnFloatVectorQuery} without
 * a filter runs it (per segment Lucene's own {@link HnswGraphSearcher} over the segment's graph,
 * live documents only, then the segments' hits merged; see {@link #search}), but with the vectors compared by
 * {@link VectorDot}: Lucene 9 compares them with scalar Java on Java 17, the 2.x line's JVM, where
 * this SIMD dot product took the candidate stage from 172 to 133 ms at p50 on IRLeD (the rest of
 * the stage is the request, the aggregation and the fetch; {@code docs/design.md}). The graph walk is Lucene's; only the arithmetic differs, so the hits are
 * the same up to float rounding of near-ties.
 *
 * <p>Which one runs: node property {@code sdr.graph_search} = {@code auto} (default: this class
 * where Lucene does not vectorise on this JVM and the vector module is present), {@code plugin}
 * (this class whenever it can) or {@code lucene}. Not thread-safe: one per probing thread.
 */
final class GraphProbe {
    private static final Logger LOGGER = LogManager.getLogger(GraphProbe.class);
    private static volatile Boolean logged;

    private final SegmentGraph[] graphs;  // per leaf; null: the leaf has no vector of the field
    private final int[] docBases;
    private final Bits[] acceptOrds;
    private final VectorDot dot;
    private final VectorSimilarityFunction function;
    private final int[] order;  // the leaves with vectors, largest graph first
    private long visited;

    private GraphProbe(SegmentGraph[] graphs, int[] docBases, Bits[] acceptOrds, VectorDot dot, VectorSimilarityFunction function) {
        this.graphs = graphs;
        this.docBases = docBases;
        this.acceptOrds = acceptOrds;
        this.dot = dot;
        this.function = function;
        List<Integer> leaves = new ArrayList<>();
        for (int l = 0; l < graphs.length; l++) {
            if (graphs[l] != null && graphs[l].size() > 0) {
                leaves.add(l);
            }
        }
        leaves.sort((a, b) -> graphs[a].size() != graphs[b].size() ? Integer.compare(graphs[b].size(), graphs[a].size())
            : Integer.compare(a, b));
        this.order = leaves.stream().mapToInt(Integer::intValue).toArray();
    }

    /** Whether the probes of this node go through this class (see the class comment), for a field of {@code function}. */
    static boolean wanted(VectorSimilarityFunction function) {
        if (function != VectorSimilarityFunction.DOT_PRODUCT && function != VectorSimilarityFunction.MAXIMUM_INNER_PRODUCT) {
            return false;
        }
        String mode = System.getProperty("sdr.graph_search", "auto").toLowerCase(Locale.ROOT);
        boolean wanted;
        switch (mode) {
            case "lucene":
                wanted = false;
                break;
            case "plugin":
                wanted = VectorDot.simd() != null;
                break;
            default:
                wanted = VectorDot.simd() != null && SegmentGraph.luceneVectorises() == false;
        }
        if (logged == null) {
            logged = wanted;
            LOGGER.info("sdr: candidate probes search the HNSW graphs {} (sdr.graph_search={})",
                wanted ? "with the plugin's vector-API dot product" : "through Lucene's k-NN query", mode);
        }
        return wanted;
    }

    /**
     * The probe over {@code leaves}, or null when some segment's graph cannot be read this way (then every
     * probe goes through Lucene's query). Live documents only, as Lucene's query without a filter.
     */
    static GraphProbe open(List<LeafReaderContext> leaves, String field, VectorSimilarityFunction function) throws IOException {
        VectorDot dot = VectorDot.simd();
        if (dot == null) {
            return null;
        }
        SegmentGraph[] graphs = new SegmentGraph[leaves.size()];
        int[] docBases = new int[leaves.size()];
        Bits[] accept = new Bits[leaves.size()];
        for (int l = 0; l < leaves.size(); l++) {
            LeafReaderContext leaf = leaves.get(l);
            docBases[l] = leaf.docBase;
            FieldInfo info = leaf.reader().getFieldInfos().fieldInfo(field);
            if (info == null || info.getVectorDimension() == 0) {
                continue;
            }
            if (info.getVectorSimilarityFunction() != function) {
                return null;
            }
            SegmentGraph graph = SegmentGraph.open(leaf.reader(), field);
            if (graph == null) {
                return null;
            }
            graphs[l] = graph;
            accept[l] = graph.acceptOrds(leaf.reader().getLiveDocs());
        }
        return new GraphProbe(graphs, docBases, accept, dot, function);
    }

    /**
     * The per-field vectors reader of {@code field} in {@code reader} when it exposes an HNSW graph
     * ({@link HnswGraphProvider}), else null: the part of {@link SegmentGraph#open} both Lucene lines share.
     */
    static KnnVectorsReader hnswReader(LeafReader reader, String field) {
        LeafReader inner = FilterLeafReader.unwrap(reader);
        if ((inner instanceof CodecReader) == false) {
            return null;
        }
        KnnVectorsReader vectorsReader = ((CodecReader) inner).getVectorReader();
        if (vectorsReader instanceof PerFieldKnnVectorsFormat.FieldsReader) {
            vectorsReader = ((PerFieldKnnVectorsFormat.FieldsReader) vectorsReader).getFieldReader(field);
        }
        return vectorsReader instanceof HnswGraphProvider ? vectorsReader : null;
    }

    /**
     * The top {@code k} sentences (shard doc ids) by the field's similarity score, best first, ties by doc id.
     * Each segment's graph is searched for k (a segment of no more than k vectors read whole, as Lucene's
     * reader does), then the segments' hits merged. As Lucene's query does on an index of several segments
     * (its {@code TopKnnCollectorManager}), the segments' searches share the best k scores found so far
     * ({@link MultiLeafKnnCollector} over one {@link BlockingFloatHeap}): a later segment's walk stops
     * exploring where it cannot beat them, so an index of many segments costs far less than one full walk per
     * segment. The largest segments are searched first, so that the shared bar is high early. Merged to one
     * segment, as `sdr reindex` leaves an index, the two walk the same graph the same way.
     */
    ScoreDoc[] search(float[] query, int k) throws IOException {
        return search(query, k, true);
    }

    /** {@link #search(float[], int)}; {@code share} false: each segment walked on its own (the tests' baseline). */
    ScoreDoc[] search(float[] query, int k, boolean share) throws IOException {
        BlockingFloatHeap shared = share && order.length > 1 ? new BlockingFloatHeap(k) : null;
        List<ScoreDoc> all = new ArrayList<>();
        visited = 0;
        for (int l : order) {
            SegmentGraph graph = graphs[l];
            RandomVectorScorer scorer = scorer(graph, query);
            Bits accept = acceptOrds[l];
            TopKnnCollector local = new TopKnnCollector(k, Integer.MAX_VALUE);
            KnnCollector collector = shared == null ? local : new MultiLeafKnnCollector(k, shared, local);
            if (k < graph.size()) {
                HnswGraphSearcher.search(scorer, collector, graph.graph(), accept);
            } else {
                for (int ord = 0; ord < graph.size(); ord++) {
                    if (accept == null || accept.get(ord)) {
                        collector.incVisitedCount(1);
                        collector.collect(ord, scorer.score(ord));
                    }
                }
            }
            visited += collector.visitedCount();
            for (ScoreDoc hit : local.topDocs().scoreDocs) {
                all.add(new ScoreDoc(docBases[l] + graph.ordToDoc(hit.doc), hit.score));
            }
        }
        all.sort((a, b) -> a.score != b.score ? Float.compare(b.score, a.score) : Integer.compare(a.doc, b.doc));
        return all.subList(0, Math.min(k, all.size())).toArray(new ScoreDoc[0]);
    }

    /** Vectors compared by the last {@link #search} (the tests read it). */
    long visited() {
        return visited;
    }

    /** Scores as the field's similarity scales them (Lucene's {@code VectorSimilarityFunction#compare}), from {@link #dot}. */
    private RandomVectorScorer scorer(SegmentGraph graph, float[] query) {
        boolean mip = function == VectorSimilarityFunction.MAXIMUM_INNER_PRODUCT;
        return new RandomVectorScorer() {
            @Override
            public float score(int node) throws IOException {
                float d = dot.dot(query, graph.vector(node));
                return mip ? VectorUtil.scaleMaxInnerProductScore(d) : Math.max((1 + d) / 2, 0);
            }

            @Override
            public int maxOrd() {
                return graph.size();
            }

            @Override
            public int ordToDoc(int ord) {
                return graph.ordToDoc(ord);
            }

            @Override
            public Bits getAcceptOrds(Bits acceptDocs) {
                return graph.acceptOrds(acceptDocs);
            }
        };
    }
}
