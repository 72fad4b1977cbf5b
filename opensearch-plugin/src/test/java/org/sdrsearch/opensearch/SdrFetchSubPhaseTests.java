/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * What the {@code sdr_vectors} ext puts on each hit ({@code _sdr_vectors}): the sentence vectors in
 * (paragraph, position) order, the normalised mean, and the centroid rows against a brute force.
 */
public class SdrFetchSubPhaseTests extends LuceneTestCase {
    public void testVectorsEncodeInParagraphAndPositionOrder() {
        CandidateSentences c = new CandidateSentences(2);
        float[][] rows = { { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } };
        long[][] at = { { 1, 3 }, { 0, 1 }, { 1, 2 }, { 0, 0 } };  // (paragraph, position), shuffled
        for (int r = 0; r < 4; r++) {
            System.arraycopy(rows[r], 0, c.add(at[r][0], at[r][1]), 0, 2);
        }
        Map<String, Object> out = SdrFetchSubPhase.encode(c, 2);
        assertEquals(4, out.get("sentences"));
        assertEquals(List.of(2, 2), out.get("paragraph_sizes"));
        float[][] decoded = SdrSource.decodeBase64((String) out.get("vectors"), 4);
        assertTrue(Arrays.deepEquals(new float[][] { { 7, 8 }, { 3, 4 }, { 5, 6 }, { 1, 2 } }, decoded));
        assertEquals(0, SdrFetchSubPhase.encode(null, 0).get("sentences"));
        Map<String, Object> mean = SdrFetchSubPhase.encodeMean(c, 2);
        assertEquals(2, mean.get("paragraphs"));
        float[][] m = SdrSource.decodeBase64((String) mean.get("mean"), 1);
        double norm = Math.sqrt(16 * 16 + 20 * 20);
        assertEquals(16 / norm, m[0][0], 1e-6);
        assertEquals(20 / norm, m[0][1], 1e-6);
    }

    public void testCentroidRowsMatchTheBruteForce() {
        // each source centroid's best cosine with the candidate's paragraph centroids (normalised paragraph means)
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random, 2, 40);
        int[] sizes = { 1, 5, 17, 2 };
        CandidateSentences c = new CandidateSentences(dim);
        float[][][] paragraphs = new float[sizes.length][][];
        List<long[]> at = new ArrayList<>();
        for (int p = 0; p < sizes.length; p++) {
            paragraphs[p] = new float[sizes[p]][dim];
            for (int k = 0; k < sizes[p]; k++) {
                for (int x = 0; x < dim; x++) {
                    paragraphs[p][k][x] = (float) random.nextGaussian();
                }
                at.add(new long[] { p, k });
            }
        }
        Collections.shuffle(at, random);  // read in any order
        for (long[] pk : at) {
            System.arraycopy(paragraphs[(int) pk[0]][(int) pk[1]], 0, c.add(pk[0], pk[1]), 0, dim);
        }
        float[][] source = new float[3][dim];
        for (float[] row : source) {
            double norm = 0;
            for (int x = 0; x < dim; x++) {
                row[x] = (float) random.nextGaussian();
                norm += row[x] * row[x];
            }
            for (int x = 0; x < dim; x++) {
                row[x] /= (float) Math.sqrt(norm);
            }
        }
        Map<String, Object> out = SdrFetchSubPhase.centroidRows(c, dim, source);
        assertEquals(25, out.get("sentences"));
        assertEquals(4, out.get("paragraphs"));
        float[][] rows = SdrSource.decodeBase64((String) out.get("centroid_rows"), 3);  // 3 rows of one value
        assertEquals(3, rows.length);
        for (int i = 0; i < source.length; i++) {
            double best = Double.NEGATIVE_INFINITY;
            for (float[][] paragraph : paragraphs) {
                double[] mean = new double[dim];
                for (float[] v : paragraph) {
                    for (int x = 0; x < dim; x++) {
                        mean[x] += v[x];
                    }
                }
                double norm = 0, dot = 0;
                for (double v : mean) {
                    norm += v * v;
                }
                for (int x = 0; x < dim; x++) {
                    dot += source[i][x] * mean[x] / Math.sqrt(norm);
                }
                best = Math.max(best, dot);
            }
            assertEquals("row " + i, best, rows[i][0], 1e-5);
        }
        Map<String, Object> none = SdrFetchSubPhase.centroidRows(null, 0, new float[0][]);
        assertEquals(0, none.get("sentences"));
        assertNull(none.get("centroid_rows"));
    }
}
