/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.document.Document;
import org.apache.lucene.document.Field;
import org.apache.lucene.document.KnnFloatVectorField;
import org.apache.lucene.document.NumericDocValuesField;
import org.apache.lucene.document.SortedNumericDocValuesField;
import org.apache.lucene.document.StoredField;
import org.apache.lucene.document.StringField;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.NoMergePolicy;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.VectorSimilarityFunction;
import org.apache.lucene.search.Explanation;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.join.QueryBitSetProducer;
import org.apache.lucene.store.Directory;
import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;
import org.opensearch.common.lucene.search.Queries;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * The rescorer on a real Lucene index laid out as OpenSearch lays out a nested mapping: each
 * candidate is a block of nested sentence documents (knn vector, paragraph and position doc
 * values) followed by its parent (which has {@code _primary_term} doc values, as
 * {@link Queries#newNonNestedFilter()} expects), in several segments. Scores are checked against
 * {@link BruteForceSdr}.
 */
public class SdrRescorerTests extends LuceneTestCase {
    private static final String FIELD = "sentences.vector";
    private static final float TOLERANCE = 1e-4f;

    /** How a candidate is written; null vectors: no sentence at all. */
    static final class Candidate {
        final String id;
        final float[][][] paragraphs;
        boolean dropOneVector;        // one sentence document without a vector
        boolean paragraphAsNumeric;   // NUMERIC instead of SORTED_NUMERIC doc values
        String group = "a";           // the parent's metadata.group (filters)

        Candidate(String id, float[][][] paragraphs) {
            this.id = id;
            this.paragraphs = paragraphs;
        }
    }

    static List<Document> block(Candidate c, Random random) {
        List<Document> docs = new ArrayList<>();
        int position = 0;
        for (int j = 0; j < c.paragraphs.length; j++) {
            for (float[] v : c.paragraphs[j]) {
                Document child = new Document();
                child.add(new StringField("_nested_path", "sentences", Field.Store.NO));
                child.add(new KnnFloatVectorField(FIELD, v, VectorSimilarityFunction.MAXIMUM_INNER_PRODUCT));
                if (c.paragraphAsNumeric) {
                    child.add(new NumericDocValuesField("sentences.paragraph", j));
                    child.add(new NumericDocValuesField("sentences.position", position));
                } else {
                    child.add(new SortedNumericDocValuesField("sentences.paragraph", j));
                    child.add(new SortedNumericDocValuesField("sentences.position", position));
                }
                docs.add(child);
                position++;
            }
        }
        Collections.shuffle(docs, random);  // the reader must not rely on the children's order
        if (c.dropOneVector) {
            Document child = new Document();  // a sentence document without a vector: not a sentence
            child.add(new StringField("_nested_path", "sentences", Field.Store.NO));
            child.add(new SortedNumericDocValuesField("sentences.paragraph", 0));
            child.add(new SortedNumericDocValuesField("sentences.position", 999));
            docs.add(random.nextInt(docs.size() + 1), child);
        }
        Document parent = new Document();
        parent.add(new StringField("_id", c.id, Field.Store.YES));
        parent.add(new StoredField("id", c.id));
        parent.add(new StringField("doc_id", c.id, Field.Store.NO));
        parent.add(new StringField("metadata.group", c.group, Field.Store.NO));
        parent.add(new NumericDocValuesField("_primary_term", 1));
        docs.add(parent);
        return docs;
    }

    private static SdrRescorerBuilder request(float[][][] source, double[] mu, double[] sigma, boolean explain) {
        return request(source, mu, sigma, explain, 0);
    }

    private static SdrRescorerBuilder request(float[][][] source, double[] mu, double[] sigma, boolean explain, int explainTop) {
        return new SdrRescorerBuilder(SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), mu, sigma, null),
            null, null, null, explain, explainTop);
    }

    private static SdrRescoreContext context(SdrRescorerBuilder request, int window) {
        return new SdrRescoreContext(window, request, new QueryBitSetProducer(Queries.newNonNestedFilter()));
    }

    private Directory index(List<Candidate> candidates, Random random, List<String> deleted) throws IOException {
        Directory dir = newDirectory();
        IndexWriterConfig config = newIndexWriterConfig().setMergePolicy(NoMergePolicy.INSTANCE);
        try (IndexWriter writer = new IndexWriter(dir, config)) {
            for (Candidate c : candidates) {
                writer.addDocuments(block(c, random));
                if (random.nextInt(3) == 0) {
                    writer.flush();  // several segments
                }
            }
            for (String id : deleted) {
                writer.deleteDocuments(new Term("_id", id));
            }
        }
        return dir;
    }

    private static String idOf(IndexSearcher searcher, int doc) throws IOException {
        return searcher.storedFields().document(doc).get("id");
    }

    public void testScoresMatchBruteForceAcrossSegments() throws IOException {
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random(), 2, 24);
        float[][][] source = BruteForceSdr.document(random, dim, 1, 5, 17);
        List<Candidate> candidates = new ArrayList<>();
        int[][] shapes = { { 1 }, { 5 }, { 17 }, { 1, 5, 17 }, { 3, 3 }, { 2, 1, 4 }, { 17, 17 }, { 1, 1, 1, 1 } };
        for (int i = 0; i < shapes.length; i++) {
            candidates.add(new Candidate("c" + i, BruteForceSdr.document(random, dim, shapes[i])));
        }
        candidates.get(2).dropOneVector = true;
        candidates.add(new Candidate("empty", new float[0][][]));  // no sentence at all
        candidates.add(new Candidate("gone", BruteForceSdr.document(random, dim, 4)));
        Collections.shuffle(candidates, random);
        Map<String, float[][][]> byId = new HashMap<>();
        List<float[][][]> corpus = new ArrayList<>();
        for (Candidate c : candidates) {
            byId.put(c.id, c.paragraphs);
            corpus.add(c.paragraphs);
        }
        double[][] stats = BruteForceSdr.statistics(source, corpus.toArray(new float[0][][][]));
        try (Directory dir = index(candidates, random, List.of("gone")); DirectoryReader reader = DirectoryReader.open(dir)) {
            assertTrue(reader.leaves().size() >= 1);
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs first = searcher.search(Queries.newNonNestedFilter(), 100);
            assertEquals(candidates.size() - 1, first.scoreDocs.length);
            SdrRescoreContext context = context(request(source, stats[0], stats[1], false), 100);
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(first, searcher, context);
            assertEquals(candidates.size() - 1, rescored.scoreDocs.length);
            float previous = Float.POSITIVE_INFINITY;
            for (ScoreDoc hit : rescored.scoreDocs) {
                String id = idOf(searcher, hit.doc);
                assertTrue("sorted by score", hit.score <= previous);
                previous = hit.score;
                if (id.equals("empty")) {
                    assertEquals(SdrRescorer.NO_SENTENCES, hit.score, 0f);
                    continue;
                }
                double expected = BruteForceSdr.score(source, byId.get(id), stats[0], stats[1]);
                assertEquals(id, expected, hit.score, TOLERANCE);
                assertTrue(context.isRescored(hit.doc));
            }
            assertEquals("the candidate without sentences sorts last", "empty",
                idOf(searcher, rescored.scoreDocs[rescored.scoreDocs.length - 1].doc));
        }
    }

    public void testSingleValuedNumericDocValues() throws IOException {
        // an index whose paragraph / position fields are NUMERIC doc values (one value per document)
        Random random = new Random(random().nextLong());
        int dim = 7;
        float[][][] source = BruteForceSdr.document(random, dim, 5, 1);
        List<Candidate> candidates = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            Candidate c = new Candidate("c" + i, BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 17), 3));
            c.paragraphAsNumeric = true;
            candidates.add(c);
        }
        double[] mu = { 0.2, 0.1 };
        double[] sigma = { 0.25, 0.5 };
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 10), searcher,
                context(request(source, mu, sigma, false), 10));
            assertEquals(6, rescored.scoreDocs.length);
            for (ScoreDoc hit : rescored.scoreDocs) {
                float[][][] cand = candidates.get(Integer.parseInt(idOf(searcher, hit.doc).substring(1))).paragraphs;
                assertEquals(BruteForceSdr.score(source, cand, mu, sigma), hit.score, TOLERANCE);
            }
        }
    }

    public void testWindowKeepsOnlyTheRescoredHits() throws IOException {
        Random random = new Random(random().nextLong());
        int dim = 8;
        float[][][] source = BruteForceSdr.document(random, dim, 2, 3);
        List<Candidate> candidates = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            candidates.add(new Candidate("c" + i, BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 6), 2)));
        }
        double[] mu = { 0.1, 0.2 };
        double[] sigma = { 0.3, 1e-9 };
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs first = searcher.search(Queries.newNonNestedFilter(), 100);
            List<Integer> firstFive = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                firstFive.add(first.scoreDocs[i].doc);
            }
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(first, searcher, context(request(source, mu, sigma, false), 5));
            assertEquals(5, rescored.scoreDocs.length);
            for (ScoreDoc hit : rescored.scoreDocs) {
                assertTrue(firstFive.contains(hit.doc));
                float[][][] cand = candidates.get(Integer.parseInt(idOf(searcher, hit.doc).substring(1))).paragraphs;
                assertEquals(BruteForceSdr.score(source, cand, mu, sigma), hit.score, TOLERANCE);
            }
        }
    }

    public void testExplanation() throws IOException {
        Random random = new Random(random().nextLong());
        int dim = 6;
        float[][][] source = BruteForceSdr.document(random, dim, 17, 1);
        float[][][] cand = BruteForceSdr.document(random, dim, 5, 1, 17);
        List<Candidate> candidates = List.of(new Candidate("a", BruteForceSdr.document(random, dim, 2)), new Candidate("b", cand),
            new Candidate("none", new float[0][][]));
        double[] mu = { 0.05, -0.05 };
        double[] sigma = { 0.5, 0.2 };
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs first = searcher.search(Queries.newNonNestedFilter(), 10);
            SdrRescoreContext context = context(request(source, mu, sigma, true), 10);
            int docB = -1;
            int docNone = -1;
            for (ScoreDoc hit : first.scoreDocs) {
                String id = idOf(searcher, hit.doc);
                docB = id.equals("b") ? hit.doc : docB;
                docNone = id.equals("none") ? hit.doc : docNone;
            }
            Explanation explanation = SdrRescorer.INSTANCE.explain(docB, searcher, context, Explanation.match(1f, "first pass"));
            assertEquals(BruteForceSdr.score(source, cand, mu, sigma), explanation.getValue().doubleValue(), 1e-5);
            assertEquals(2, explanation.getDetails().length);
            for (int i = 0; i < 2; i++) {
                int j = BruteForceSdr.bestParagraph(source[i], cand, mu[i], sigma[i]);
                double p = BruteForceSdr.paragraphScore(source[i], cand[j]);
                assertEquals((p - mu[i]) / sigma[i], explanation.getDetails()[i].getValue().doubleValue(), 1e-5);
                assertTrue(explanation.getDetails()[i].getDescription(),
                    explanation.getDetails()[i].getDescription().contains("best candidate paragraph " + j + ","));
            }
            Map<String, Object> map = SdrRescorer.explainMap(docB, searcher, context);
            assertEquals(23, map.get("sentences"));
            assertEquals(3, map.get("paragraphs"));
            Explanation none = SdrRescorer.INSTANCE.explain(docNone, searcher, context, null);
            assertEquals(SdrRescorer.NO_SENTENCES, none.getValue().floatValue(), 0f);
        }
    }

    public void testWrongDimensionIsRefused() throws IOException {
        Random random = new Random(random().nextLong());
        List<Candidate> candidates = List.of(new Candidate("a", BruteForceSdr.document(random, 8, 2)));
        float[][][] source = BruteForceSdr.document(random, 5, 1);
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs first = searcher.search(Queries.newNonNestedFilter(), 10);
            IllegalArgumentException e = expectThrows(IllegalArgumentException.class,
                () -> SdrRescorer.INSTANCE.rescore(first, searcher, context(request(source, new double[] { 0 },
                    new double[] { 1 }, false), 10)));
            assertTrue(e.getMessage(), e.getMessage().contains("the source vectors have 5 dimensions but field [sentences.vector] has 8"));
        }
    }

    public void testSegmentWithoutVectorsScoresNoSentences() throws IOException {
        Random random = new Random(random().nextLong());
        List<Candidate> candidates = List.of(new Candidate("empty1", new float[0][][]), new Candidate("empty2", new float[0][][]));
        float[][][] source = BruteForceSdr.document(random, 3, 1);
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs first = searcher.search(Queries.newNonNestedFilter(), 10);
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(first, searcher,
                context(request(source, new double[] { 0 }, new double[] { 1 }, false), 10));
            assertEquals(2, rescored.scoreDocs.length);
            for (ScoreDoc hit : rescored.scoreDocs) {
                assertEquals(SdrRescorer.NO_SENTENCES, hit.score, 0f);
            }
        }
    }

    public void testWindowScoredOnSeveralThreads() throws Exception {
        // the window split over the plugin's pool (SdrThreads): the same scores as the brute force,
        // and a failure in a helper thread reaches the caller as itself
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random(), 3, 40);
        float[][][] source = BruteForceSdr.document(random, dim, 4, 9);
        List<Candidate> candidates = new ArrayList<>();
        for (int i = 0; i < 53; i++) {
            candidates.add(new Candidate("c" + i, BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 17),
                TestUtil.nextInt(random(), 1, 5))));
        }
        double[] mu = { 0.1, 0.05 };
        double[] sigma = { 0.3, 0.2 };
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            SdrThreads.set(pool, 4);
            IndexSearcher searcher = new IndexSearcher(reader);
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 100), searcher,
                context(request(source, mu, sigma, false), 100));
            assertEquals(53, rescored.scoreDocs.length);
            float previous = Float.POSITIVE_INFINITY;
            for (ScoreDoc hit : rescored.scoreDocs) {
                float[][][] cand = candidates.get(Integer.parseInt(idOf(searcher, hit.doc).substring(1))).paragraphs;
                assertEquals(BruteForceSdr.score(source, cand, mu, sigma), hit.score, TOLERANCE);
                assertTrue(hit.score <= previous);
                previous = hit.score;
            }
            float[][][] wrong = BruteForceSdr.document(random, dim + 1, 2);
            IllegalArgumentException e = expectThrows(IllegalArgumentException.class,
                () -> SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 100), searcher,
                    context(request(wrong, new double[] { 0 }, new double[] { 1 }, false), 100)));
            assertTrue(e.getMessage(), e.getMessage().contains("dimensions"));
        } finally {
            SdrThreads.set(null, 1);
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    public void testAnExplainedWindowKeepsEachHitsBreakdownForTheFetchPhase() throws Exception {
        // with explain the rescore computes each hit's breakdown with its score (one hit per chunk on the pool), and
        // keeps it for the fetch phase: the same map the fetch phase computes on its own, its score the hit's score
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random(), 3, 24);
        float[][][] source = BruteForceSdr.document(random, dim, 3, 1, 6);
        List<Candidate> candidates = new ArrayList<>();
        for (int i = 0; i < 11; i++) {
            candidates.add(new Candidate("c" + i, BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 9),
                TestUtil.nextInt(random(), 1, 4))));
        }
        candidates.add(new Candidate("empty", new float[0][][]));
        double[] mu = { 0.1, 0.05, 0.2 };
        double[] sigma = { 0.3, 0.2, 1e-7 };
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            SdrThreads.set(pool, 3);
            IndexSearcher searcher = new IndexSearcher(reader);
            SdrRescoreContext context = context(request(source, mu, sigma, true), 100);
            TopDocs rescored = SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 100), searcher, context);
            assertEquals(12, rescored.scoreDocs.length);
            for (ScoreDoc hit : rescored.scoreDocs) {
                String id = idOf(searcher, hit.doc);
                Map<String, Object> kept = context.takeExplained(hit.doc);
                assertNotNull(id, kept);
                assertEquals(id, SdrRescorer.explainMap(hit.doc, searcher, context), kept);
                assertNull("taken once", context.takeExplained(hit.doc));
                if (id.equals("empty")) {
                    assertEquals(SdrRescorer.NO_SENTENCES, hit.score, 0f);
                    assertNull(kept.get("score"));
                    continue;
                }
                float[][][] cand = candidates.get(Integer.parseInt(id.substring(1))).paragraphs;
                assertEquals(id, BruteForceSdr.score(source, cand, mu, sigma), hit.score, TOLERANCE);
                assertEquals(id, (Double) kept.get("score"), hit.score, 1e-6);
            }
        } finally {
            SdrThreads.set(null, 1);
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    public void testExplainTopKeepsTheBreakdownOfTheBestHitsOnly() throws Exception {
        // explain_top n: every hit of the window scored as without it, and the breakdown kept for the n best only
        // (the hits the caller presents), each the map the fetch phase would compute; on one thread and on a pool
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random(), 3, 24);
        float[][][] source = BruteForceSdr.document(random, dim, 3, 1, 6);
        List<Candidate> candidates = new ArrayList<>();
        int n = TestUtil.nextInt(random(), 5, 30);
        for (int i = 0; i < n; i++) {
            candidates.add(new Candidate("c" + i, BruteForceSdr.document(random, dim, TestUtil.nextInt(random(), 1, 9),
                TestUtil.nextInt(random(), 1, 4))));
        }
        for (int copy = 0; copy < 3; copy++) {  // equal scores: the top's boundary among them goes by doc id
            candidates.add(new Candidate("copy" + copy, candidates.get(0).paragraphs));
        }
        n = candidates.size();
        double[] mu = { 0.1, 0.05, 0.2 };
        double[] sigma = { 0.3, 0.2, 1e-7 };
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (Directory dir = index(candidates, random, List.of()); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            for (int threads : new int[] { 1, 3 }) {
                SdrThreads.set(threads == 1 ? null : pool, threads);
                TopDocs plain = SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 100), searcher,
                    context(request(source, mu, sigma, false), 100));
                for (int top : new int[] { 1, 4, n, n + 3 }) {
                    SdrRescoreContext context = context(request(source, mu, sigma, false, top), 100);
                    TopDocs rescored = SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), 100), searcher,
                        context);
                    assertEquals(n, rescored.scoreDocs.length);
                    for (int r = 0; r < n; r++) {
                        ScoreDoc hit = rescored.scoreDocs[r];
                        assertEquals("same order and scores as without explain_top", plain.scoreDocs[r].doc, hit.doc);
                        assertEquals(plain.scoreDocs[r].score, hit.score, 0f);
                        Map<String, Object> kept = context.takeExplained(hit.doc);
                        if (r < top) {
                            assertNotNull("rank " + r + " of top " + top, kept);
                            assertEquals(SdrRescorer.explainMap(hit.doc, searcher, context), kept);
                            assertEquals((Double) kept.get("score"), hit.score, 1e-6);
                        } else {
                            assertNull("rank " + r + " is below the top " + top, kept);
                        }
                    }
                }
            }
        } finally {
            SdrThreads.set(null, 1);
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }
}
