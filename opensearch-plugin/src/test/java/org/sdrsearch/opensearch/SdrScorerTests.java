/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import com.carrotsearch.randomizedtesting.annotations.Name;
import com.carrotsearch.randomizedtesting.annotations.ParametersFactory;
import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * {@link SdrScorer} against the brute-force SDR of {@link BruteForceSdr}, on awkward sizes, once per
 * {@link MatchKernel} (the scalar one and the vector-API one: the test JVM runs with
 * {@code --add-modules jdk.incubator.vector}, as a node does). (Lucene's test case, not OpenSearch's:
 * OpenSearchTestCase refuses to run as root, and CI runs as root.)
 */
public class SdrScorerTests extends LuceneTestCase {
    private static final double TOLERANCE = 1e-5;

    private final String kernelName;

    public SdrScorerTests(@Name("kernel") String kernel) {
        this.kernelName = kernel;
    }

    @ParametersFactory
    public static Iterable<Object[]> kernels() {
        List<Object[]> out = new ArrayList<>();
        out.add(new Object[] { "scalar" });
        out.add(new Object[] { "panama" });
        return out;
    }

    private MatchKernel kernel() {
        if (kernelName.equals("scalar")) {
            return MatchKernel.scalar();
        }
        MatchKernel panama = MatchKernel.panama();
        assertNotNull("the vector-API kernel must load in the test JVM (surefire adds jdk.incubator.vector)", panama);
        return panama;
    }

    private SdrScorer scorer(SdrSource source) {
        return new SdrScorer(source, kernel());
    }

    public void testKernelTilesAgainstBruteForce() {
        // sizes around the kernel's tiles: 4 source rows, blocks of 8 or 16 candidate lanes, 2 blocks per pass
        Random random = new Random(random().nextLong());
        int[] sourceSizes = { 1, 3, 4, 5, 7, 8, 9 };
        int[] candidateSizes = { 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 49 };
        for (int dim : new int[] { 1, 3, 17, 384 }) {
            for (int s : sourceSizes) {
                float[][][] source = BruteForceSdr.document(random, dim, s);
                for (int m : candidateSizes) {
                    int first = TestUtil.nextInt(random(), 1, m);
                    float[][][] cand = first == m ? BruteForceSdr.document(random, dim, m)
                        : BruteForceSdr.document(random, dim, first, m - first);
                    double[] mu = { 0.05 };
                    double[] sigma = { 0.5 };
                    assertEquals("dim " + dim + ", " + s + " x " + m, BruteForceSdr.score(source, cand, mu, sigma),
                        scorer(source(source, mu, sigma)).score(candidate(cand, dim, random)), TOLERANCE);
                }
            }
        }
    }

    private static CandidateSentences candidate(float[][][] doc, int dim, Random random) {
        // sentences in a shuffled read order; paragraph and position say where each belongs
        int n = BruteForceSdr.rows(doc).length;
        long[][] entries = new long[n][];
        int position = 0;
        for (int j = 0; j < doc.length; j++) {
            for (int r = 0; r < doc[j].length; r++) {
                entries[position] = new long[] { j, position, r };
                position++;
            }
        }
        List<long[]> shuffled = Arrays.asList(entries);
        java.util.Collections.shuffle(shuffled, random);
        CandidateSentences c = new CandidateSentences(dim);
        for (long[] e : shuffled) {
            float[] row = c.add(e[0], e[1]);
            System.arraycopy(doc[(int) e[0]][(int) e[2]], 0, row, 0, dim);
        }
        return c;
    }

    private static SdrSource source(float[][][] doc, double[] mu, double[] sigma) {
        return SdrSource.of(BruteForceSdr.rows(doc), BruteForceSdr.sizes(doc), mu, sigma, null);
    }

    public void testAwkwardSizesAgainstBruteForce() {
        Random random = new Random(random().nextLong());
        int dim = new int[] { 1, 3, 16, 384 }[random().nextInt(4)];
        int[][] shapes = {
            { 1 },                 // one sentence, one paragraph
            { 5 },                 // one paragraph of 5
            { 17 },                // one paragraph of 17
            { 1, 5, 17 },          // 23 sentences
            { 2, 1, 1, 3 },
            { 17, 1 } };
        for (int[] sourceShape : shapes) {
            float[][][] source = BruteForceSdr.document(random, dim, sourceShape);
            for (int[] candidateShape : shapes) {
                float[][][] cand = BruteForceSdr.document(random, dim, candidateShape);
                float[][][] other = BruteForceSdr.document(random, dim, 3, 2);
                double[][] stats = BruteForceSdr.statistics(source, cand, other);
                SdrScorer scorer = scorer(source(source, stats[0], stats[1]));
                double expected = BruteForceSdr.score(source, cand, stats[0], stats[1]);
                double got = scorer.score(candidate(cand, dim, random));
                assertEquals(Arrays.toString(sourceShape) + " vs " + Arrays.toString(candidateShape), expected, got, TOLERANCE);
            }
        }
    }

    public void testSigmaBelowFloorCountsAsOne() {
        Random random = new Random(random().nextLong());
        int dim = 8;
        float[][][] source = BruteForceSdr.document(random, dim, 5, 1);
        float[][][] cand = BruteForceSdr.document(random, dim, 17);
        double[] mu = { 0.1, -0.2 };
        double[] sigma = { 1e-7, 0.0 };
        double expected = BruteForceSdr.score(source, cand, mu, new double[] { 1, 1 });
        assertEquals(expected, scorer(source(source, mu, sigma)).score(candidate(cand, dim, random)), TOLERANCE);
        // just at the floor it is used as it is
        double[] atFloor = { 1e-6, 1e-6 };
        double scaled = BruteForceSdr.score(source, cand, mu, atFloor);
        assertEquals(scaled, scorer(source(source, mu, atFloor)).score(candidate(cand, dim, random)),
            Math.abs(scaled) * 1e-6);
    }

    public void testIdenticalDocumentScoresItsParagraphMeans() {
        // a document against itself: P_ii = 1 for unit vectors, the best j for each i is i itself (mu 0, sigma 1)
        Random random = new Random(random().nextLong());
        int dim = 32;
        float[][][] doc = BruteForceSdr.document(random, dim, 1, 5, 17);
        double[] zeros = new double[3];
        double[] ones = { 1, 1, 1 };
        SdrScorer scorer = scorer(source(doc, zeros, ones));
        assertEquals(1.0, scorer.score(candidate(doc, dim, random)), 1e-5);
        Map<String, Object> explained = scorer.explain(candidate(doc, dim, random));
        List<?> rows = (List<?>) explained.get("source_paragraphs");
        for (int i = 0; i < 3; i++) {
            Map<?, ?> row = (Map<?, ?>) rows.get(i);
            assertEquals((long) i, row.get("candidate_paragraph"));
            List<?> pairs = (List<?>) row.get("sentence_pairs");
            assertEquals(doc[i].length, pairs.size());
            for (int k = 0; k < pairs.size(); k++) {
                Map<?, ?> pair = (Map<?, ?>) pairs.get(k);
                assertEquals(k, pair.get("source_sentence"));
                assertEquals(k, pair.get("candidate_sentence"));
                assertEquals(1.0, (Double) pair.get("cosine"), 1e-5);
            }
        }
    }

    public void testExplainMatchesBruteForce() {
        Random random = new Random(random().nextLong());
        int dim = 12;
        float[][][] source = BruteForceSdr.document(random, dim, 1, 5, 17);
        float[][][] cand = BruteForceSdr.document(random, dim, 4, 1, 6, 2);
        double[][] stats = BruteForceSdr.statistics(source, cand, BruteForceSdr.document(random, dim, 2, 2));
        SdrScorer scorer = scorer(source(source, stats[0], stats[1]));
        Map<String, Object> explained = scorer.explain(candidate(cand, dim, random));
        assertEquals(BruteForceSdr.score(source, cand, stats[0], stats[1]), (Double) explained.get("score"), TOLERANCE);
        assertEquals(13, explained.get("sentences"));
        assertEquals(4, explained.get("paragraphs"));
        List<?> rows = (List<?>) explained.get("source_paragraphs");
        assertEquals(3, rows.size());
        for (int i = 0; i < 3; i++) {
            Map<?, ?> row = (Map<?, ?>) rows.get(i);
            int j = BruteForceSdr.bestParagraph(source[i], cand, stats[0][i], stats[1][i]);
            assertEquals(i, row.get("source_paragraph"));
            assertEquals((long) j, row.get("candidate_paragraph"));
            double p = BruteForceSdr.paragraphScore(source[i], cand[j]);
            assertEquals(p, (Double) row.get("paragraph_score"), TOLERANCE);
            assertEquals((p - stats[0][i]) / stats[1][i], (Double) row.get("normalised_score"), TOLERANCE);
            List<?> pairs = (List<?>) row.get("sentence_pairs");
            int firstPosition = 0;
            for (int q = 0; q < j; q++) {
                firstPosition += cand[q].length;
            }
            for (int k = 0; k < source[i].length; k++) {
                Map<?, ?> pair = (Map<?, ?>) pairs.get(k);
                int bestR = 0;
                for (int r = 1; r < cand[j].length; r++) {
                    if (BruteForceSdr.dot(source[i][k], cand[j][r]) > BruteForceSdr.dot(source[i][k], cand[j][bestR])) {
                        bestR = r;
                    }
                }
                assertEquals(bestR, pair.get("candidate_sentence"));
                assertEquals((long) (firstPosition + bestR), pair.get("candidate_position"));
                assertEquals(BruteForceSdr.dot(source[i][k], cand[j][bestR]), (Double) pair.get("cosine"), TOLERANCE);
            }
        }
    }

    public void testPartsAverageEachPartsMean() {
        Random random = new Random(random().nextLong());
        int dim = 6;
        float[][][] a = BruteForceSdr.document(random, dim, 2, 3);
        float[][][] b = BruteForceSdr.document(random, dim, 17);
        float[][][] merged = { a[0], a[1], b[0] };
        float[][][] cand = BruteForceSdr.document(random, dim, 5, 1);
        double[] mu = { 0.1, 0.2, 0.3 };
        double[] sigma = { 0.5, 0.25, 2 };
        double expected = (BruteForceSdr.score(a, cand, new double[] { 0.1, 0.2 }, new double[] { 0.5, 0.25 })
            + BruteForceSdr.score(b, cand, new double[] { 0.3 }, new double[] { 2 })) / 2;
        SdrSource source = SdrSource.of(BruteForceSdr.rows(merged), BruteForceSdr.sizes(merged), mu, sigma, new int[] { 2, 1 });
        assertEquals(expected, scorer(source).score(candidate(cand, dim, random)), TOLERANCE);
    }

    public void testNoSentenceIsMinusInfinity() {
        Random random = new Random(random().nextLong());
        float[][][] source = BruteForceSdr.document(random, 4, 2);
        SdrScorer scorer = scorer(source(source, new double[] { 0 }, new double[] { 1 }));
        CandidateSentences empty = new CandidateSentences(4);
        assertEquals(Double.NEGATIVE_INFINITY, scorer.score(empty), 0);
        Map<String, Object> explained = scorer.explain(empty);
        assertNull(explained.get("score"));
        assertEquals(0, explained.get("sentences"));
        assertEquals(List.of(), explained.get("source_paragraphs"));
    }

    public void testScratchIsReusedAcrossCandidatesOfDifferentShapes() {
        Random random = new Random(random().nextLong());
        int dim = 5;
        float[][][] source = BruteForceSdr.document(random, dim, 3, 2);
        double[] mu = { 0.05, -0.1 };
        double[] sigma = { 0.3, 0.7 };
        SdrScorer scorer = scorer(source(source, mu, sigma));
        for (int round = 0; round < 20; round++) {
            int[] shape = new int[TestUtil.nextInt(random(), 1, 6)];
            for (int j = 0; j < shape.length; j++) {
                shape[j] = TestUtil.nextInt(random(), 1, 17);
            }
            float[][][] cand = BruteForceSdr.document(random, dim, shape);
            assertEquals(BruteForceSdr.score(source, cand, mu, sigma), scorer.score(candidate(cand, dim, random)), TOLERANCE);
        }
    }
}
