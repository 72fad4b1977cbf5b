/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.document.Document;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.NoMergePolicy;
import org.apache.lucene.index.Term;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TermInSetQuery;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.search.join.QueryBitSetProducer;
import org.apache.lucene.search.join.ToChildBlockJoinQuery;
import org.apache.lucene.store.Directory;
import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;
import org.apache.lucene.util.BytesRef;
import org.opensearch.common.lucene.search.Queries;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * {@link SdrCandidatesQuery} on a real Lucene index laid out as OpenSearch lays out the nested mapping
 * (SdrRescorerTests' blocks, several segments), against a brute force written here: for each source
 * sentence the exact top-k documents by best sentence, aggregated as the Python engine's
 * reranker/candidates.py does. The index is small and ef_search large, so HNSW finds the exact
 * neighbours.
 */
public class SdrCandidatesQueryTests extends LuceneTestCase {
    private static final String FIELD = "sentences.vector";

    private static Directory index(List<SdrRescorerTests.Candidate> candidates, Random random) throws IOException {
        return index(candidates, random, false);
    }

    /** {@code flushEach}: one segment per document, so that each segment's HNSW graph holds a handful of vectors
     * and a search of at least that many visits all of them: exact, as the brute force it is compared with. */
    private static Directory index(List<SdrRescorerTests.Candidate> candidates, Random random, boolean flushEach) throws IOException {
        Directory dir = newDirectory();
        IndexWriterConfig config = newIndexWriterConfig().setMergePolicy(NoMergePolicy.INSTANCE);
        try (IndexWriter writer = new IndexWriter(dir, config)) {
            for (SdrRescorerTests.Candidate c : candidates) {
                List<Document> block = SdrRescorerTests.block(c, random);
                writer.addDocuments(block);
                if (flushEach || random.nextInt(4) == 0) {
                    writer.flush();
                }
            }
        }
        return dir;
    }

    /** The exact hits of one source sentence: up to k (doc id, best cosine), best first, ties by id. */
    private static List<Map.Entry<String, Float>> exactTop(float[] s, Map<String, float[][][]> docs, Set<String> allowed, int k) {
        List<Map.Entry<String, Float>> all = new ArrayList<>();
        for (Map.Entry<String, float[][][]> e : docs.entrySet()) {
            if (allowed.contains(e.getKey()) == false || e.getValue().length == 0) {
                continue;
            }
            float best = Float.NEGATIVE_INFINITY;
            for (float[] v : BruteForceSdr.rows(e.getValue())) {
                best = Math.max(best, (float) BruteForceSdr.dot(s, v));
            }
            all.add(Map.entry(e.getKey(), best));
        }
        all.sort(Comparator.comparing((Map.Entry<String, Float> e) -> -e.getValue()).thenComparing(Map.Entry::getKey));
        return all.subList(0, Math.min(k, all.size()));
    }

    /** reranker/candidates.py's aggregate_hits, written out plainly. */
    private static Map<String, Double> aggregate(String method, float[][][] source, double[] mu, double[] sigma,
                                                 List<List<Map.Entry<String, Float>>> rows) {
        Map<String, Double> out = new LinkedHashMap<>();
        int n = source.length;
        int[] paragraphOf = new int[rows.size()];
        int at = 0;
        for (int i = 0; i < n; i++) {
            for (int k = 0; k < source[i].length; k++) {
                paragraphOf[at++] = i;
            }
        }
        for (List<Map.Entry<String, Float>> row : rows) {
            for (Map.Entry<String, Float> hit : row) {
                out.put(hit.getKey(), 0.0);
            }
        }
        if (method.equals("sdr-bound")) {
            double[] floors = new double[rows.size()];
            for (int k = 0; k < rows.size(); k++) {
                float floor = rows.get(k).isEmpty() ? 0f : Float.POSITIVE_INFINITY;
                for (Map.Entry<String, Float> hit : rows.get(k)) {
                    floor = Math.min(floor, hit.getValue());
                }
                floors[k] = floor;
            }
            for (String doc : out.keySet()) {
                double[] a = new double[n];
                for (int k = 0; k < rows.size(); k++) {
                    double b = floors[k];
                    for (Map.Entry<String, Float> hit : rows.get(k)) {
                        if (hit.getKey().equals(doc)) {
                            b = hit.getValue();
                        }
                    }
                    a[paragraphOf[k]] += b / source[paragraphOf[k]].length;
                }
                double total = 0;
                for (int i = 0; i < n; i++) {
                    total += mu == null ? a[i] : (a[i] - mu[i]) / sigma[i];
                }
                out.put(doc, total / n);
            }
            return out;
        }
        for (int k = 0; k < rows.size(); k++) {
            int i = paragraphOf[k];
            for (Map.Entry<String, Float> hit : rows.get(k)) {
                double add;
                switch (method) {
                    case "votes": add = 1; break;
                    case "sum": add = hit.getValue(); break;
                    default: add = hit.getValue() / (source[i].length * (sigma == null ? 1.0 : sigma[i]));
                }
                out.merge(hit.getKey(), add, Double::sum);
            }
        }
        return out;
    }

    static Map<String, Double> run(IndexSearcher searcher, SdrCandidatesQuery query) throws IOException {
        TopDocs top = searcher.search(query, 10_000);
        Map<String, Double> got = new HashMap<>();
        for (ScoreDoc hit : top.scoreDocs) {
            got.put(searcher.storedFields().document(hit.doc).get("id"), (double) hit.score);
        }
        return got;
    }

    static void assertSameScores(String what, Map<String, Double> expected, Map<String, Double> got) {
        assertEquals(what + ": the documents seen", new HashSet<>(expected.keySet()), got.keySet());
        for (Map.Entry<String, Double> e : expected.entrySet()) {
            assertEquals(what + ": " + e.getKey(), e.getValue(), got.get(e.getKey()), 1e-4 * Math.max(1, Math.abs(e.getValue())));
        }
    }

    public void testEveryAggregationMatchesTheBruteForce() throws Exception {
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random(), 4, 24);
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        Map<String, float[][][]> docs = new HashMap<>();
        for (int i = 0; i < 40; i++) {
            int[] shape = new int[TestUtil.nextInt(random(), 1, 4)];
            for (int j = 0; j < shape.length; j++) {
                shape[j] = TestUtil.nextInt(random(), 1, 6);
            }
            SdrRescorerTests.Candidate c = new SdrRescorerTests.Candidate("c" + i, BruteForceSdr.document(random, dim, shape));
            c.group = i % 3 == 0 ? "x" : "y";
            candidates.add(c);
            docs.put(c.id, c.paragraphs);
        }
        SdrRescorerTests.Candidate empty = new SdrRescorerTests.Candidate("empty", new float[0][][]);
        candidates.add(empty);
        docs.put("empty", empty.paragraphs);
        float[][][] source = BruteForceSdr.document(random, dim, 1, 5, 3);
        double[] mu = { 0.05, 0.1, -0.02 };
        double[] sigma = { 0.2, 0.5, 1.0 };
        int k = TestUtil.nextInt(random(), 1, 12);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (Directory dir = index(candidates, random); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            BitSetProducer parents = new QueryBitSetProducer(Queries.newNonNestedFilter());
            Set<String> everyone = new HashSet<>(docs.keySet());
            for (boolean threads : new boolean[] { false, true }) {
                SdrThreads.set(threads ? pool : null, threads ? 3 : 1);
                for (String method : new String[] { "weighted-sum", "sum", "votes", "sdr-bound" }) {
                    for (boolean stats : new boolean[] { true, false }) {
                        SdrSource s = SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), stats ? mu : new double[3],
                            stats ? sigma : new double[] { 1, 1, 1 }, null);
                        SdrCandidatesQuery query = new SdrCandidatesQuery(FIELD, s, stats, k, 1000,
                            CandidateAggregator.Method.of(method), null, null, 0, parents);
                        List<List<Map.Entry<String, Float>>> rows = new ArrayList<>();
                        for (float[] v : BruteForceSdr.rows(source)) {
                            rows.add(exactTop(v, docs, everyone, k));
                        }
                        assertSameScores(method + (stats ? " with" : " without") + " statistics",
                            aggregate(method, source, stats ? mu : null, stats ? sigma : null, rows), run(searcher, query));
                    }
                }
            }
            // the source document left out (k not raised: asked on top), and a filter on a parent field
            SdrThreads.set(null, 1);
            SdrSource s = SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), mu, sigma, null);
            Query excluded = new TermInSetQuery("doc_id", List.of(new BytesRef("c1"), new BytesRef("c2")));
            Set<String> allowed = new HashSet<>(everyone);
            allowed.removeAll(List.of("c1", "c2"));
            List<List<Map.Entry<String, Float>>> rows = new ArrayList<>();
            for (float[] v : BruteForceSdr.rows(source)) {
                rows.add(exactTop(v, docs, allowed, k));
            }
            assertSameScores("excluded ids", aggregate("weighted-sum", source, mu, sigma, rows), run(searcher,
                new SdrCandidatesQuery(FIELD, s, true, k, 1000, CandidateAggregator.Method.WEIGHTED_SUM, null, excluded, 2, parents)));
            Query parentFilter = new BooleanQuery.Builder()
                .add(new TermQuery(new Term("metadata.group", "x")), BooleanClause.Occur.FILTER)
                .add(Queries.newNonNestedFilter(), BooleanClause.Occur.FILTER)
                .add(excluded, BooleanClause.Occur.MUST_NOT).build();
            Set<String> inGroup = new HashSet<>();
            for (SdrRescorerTests.Candidate c : candidates) {
                if (c.group.equals("x") && c.id.equals("c1") == false && c.id.equals("c2") == false) {
                    inGroup.add(c.id);
                }
            }
            rows.clear();
            for (float[] v : BruteForceSdr.rows(source)) {
                rows.add(exactTop(v, docs, inGroup, k));
            }
            Map<String, Double> filtered = run(searcher, new SdrCandidatesQuery(FIELD, s, true, k, 1000,
                CandidateAggregator.Method.WEIGHTED_SUM, new ToChildBlockJoinQuery(parentFilter, parents), null, 0, parents));
            assertSameScores("filter", aggregate("weighted-sum", source, mu, sigma, rows), filtered);
            assertTrue(inGroup.containsAll(filtered.keySet()));
        } finally {
            SdrThreads.set(null, 1);
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    /** More documents seen than the aggregator's first arrays hold (256): its slots grow while the hits are added
     * (a query on IRLeD failed with "Index 256 out of bounds for length 256" when they did not). */
    public void testMoreThan256DocumentsSeenMatchTheBruteForce() throws Exception {
        Random random = new Random(random().nextLong());
        int dim = 8;
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        Map<String, float[][][]> docs = new HashMap<>();
        for (int i = 0; i < 400; i++) {
            SdrRescorerTests.Candidate c = new SdrRescorerTests.Candidate("c" + i,
                BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 2)));
            c.group = "y";
            candidates.add(c);
            docs.put(c.id, c.paragraphs);
        }
        float[][][] source = BruteForceSdr.document(random, dim, 4, 5, 3);
        double[] mu = { 0.05, 0.1, -0.02 };
        double[] sigma = { 0.2, 0.5, 1.0 };
        int k = 80;  // 12 source sentences x 80 hits: well over 256 distinct documents
        SdrThreads.set(null, 1);
        try (Directory dir = index(candidates, random); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            BitSetProducer parents = new QueryBitSetProducer(Queries.newNonNestedFilter());
            Set<String> everyone = new HashSet<>(docs.keySet());
            List<List<Map.Entry<String, Float>>> rows = new ArrayList<>();
            for (float[] v : BruteForceSdr.rows(source)) {
                rows.add(exactTop(v, docs, everyone, k));
            }
            for (String method : new String[] { "weighted-sum", "sum", "votes", "sdr-bound" }) {
                SdrSource s = SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), mu, sigma, null);
                Map<String, Double> got = run(searcher, new SdrCandidatesQuery(FIELD, s, true, k, 1000,
                    CandidateAggregator.Method.of(method), null, null, 0, parents));
                assertTrue(method + ": documents seen " + got.size(), got.size() > 256);
                assertSameScores(method, aggregate(method, source, mu, sigma, rows), got);
            }
        }
    }

    public void testSentenceSearchKeepsTheDocumentsOfTheTopSentences() throws Exception {
        // "sentences" mode: per source sentence the top max(k x oversample, ef_search) sentences, each document once,
        // the first k documents (the embedded store's nested k-NN). A tiny index: HNSW is exact there.
        Random random = new Random(random().nextLong());
        int dim = 8;
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        Map<String, float[][][]> docs = new HashMap<>();
        for (int i = 0; i < 12; i++) {
            SdrRescorerTests.Candidate c = new SdrRescorerTests.Candidate("c" + i,
                BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 3)));
            candidates.add(c);
            docs.put(c.id, c.paragraphs);
        }
        float[][][] source = BruteForceSdr.document(random, dim, 2, 2);
        double[] mu = { 0.0, 0.0 };
        double[] sigma = { 1.0, 1.0 };
        int k = 3;
        int oversample = 2;
        // one segment per document (at most 3 sentences each, fewer than the 6 sentences searched): HNSW exact, so the
        // comparison checks the window and the one-hit-per-document rule, not the graph's recall (a random index of
        // several documents per segment once missed a sentence: seed 533DBCD7E8B92D05)
        try (Directory dir = index(candidates, random, true); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            BitSetProducer parents = new QueryBitSetProducer(Queries.newNonNestedFilter());
            SdrSource s = SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), mu, sigma, null);
            List<List<Map.Entry<String, Float>>> rows = new ArrayList<>();
            for (float[] v : BruteForceSdr.rows(source)) {
                List<Map.Entry<String, Float>> sentences = new ArrayList<>();
                for (Map.Entry<String, float[][][]> e : docs.entrySet()) {
                    for (float[] row : BruteForceSdr.rows(e.getValue())) {
                        sentences.add(Map.entry(e.getKey(), (float) BruteForceSdr.dot(v, row)));
                    }
                }
                sentences.sort(Comparator.comparing((Map.Entry<String, Float> e) -> -e.getValue()));
                List<Map.Entry<String, Float>> kept = new ArrayList<>();
                Set<String> seen = new HashSet<>();
                for (Map.Entry<String, Float> e : sentences.subList(0, k * oversample)) {
                    if (seen.add(e.getKey()) && kept.size() < k) {
                        kept.add(e);
                    }
                }
                rows.add(kept);
            }
            Map<String, Double> got = run(searcher, new SdrCandidatesQuery(FIELD, s, false, k, 1,
                CandidateAggregator.Method.SUM, null, null, 0, parents, oversample));
            assertSameScores("sentences", aggregate("sum", source, null, null, rows), got);
        }
    }

    public void testCosineInvertsEachSimilarity() {
        for (float cos : new float[] { -0.9f, -0.2f, 0f, 0.3f, 0.99f }) {
            float[] a = { 1f, 0f };
            float[] b = { cos, (float) Math.sqrt(1 - cos * cos) };
            for (org.apache.lucene.index.VectorSimilarityFunction f : org.apache.lucene.index.VectorSimilarityFunction.values()) {
                assertEquals(f + " " + cos, cos, SdrCandidatesQuery.cosine(f, f.compare(a, b)), 1e-5);
            }
        }
    }
}
