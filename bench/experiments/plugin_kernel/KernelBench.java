/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.util.Arrays;
import java.util.Random;

/**
 * The plugin's exact SDR scorer alone, in a plain JVM (no node): {@link SdrScorer#score} of a window of 100
 * random candidates of 150-229 sentences (paragraphs of 12) against a source of 190 sentences (19 paragraphs of
 * 10), 384 dimensions, on one thread with the kernel the JVM loads ({@link MatchKernel#panama}). Prints the
 * median and the minimum of 30 windows after 10 of warm-up. Run by {@code run.sh}, which compiles it against
 * the built plugin jar: the same jar on two JDKs tells their compilers apart.
 */
public class KernelBench {
    public static void main(String[] args) {
        int dim = 384, nSource = 190, docs = 100;
        Random r = new Random(7);
        float[][] src = new float[nSource][dim];
        for (float[] v : src) for (int i = 0; i < dim; i++) v[i] = (float) r.nextGaussian();
        int[] sizes = new int[19]; Arrays.fill(sizes, 10);
        double[] mu = new double[19], sigma = new double[19]; Arrays.fill(sigma, 0.5);
        SdrSource source = SdrSource.of(src, sizes, mu, sigma, null);
        CandidateSentences[] cands = new CandidateSentences[docs];
        for (int d = 0; d < docs; d++) {
            CandidateSentences c = new CandidateSentences(dim);
            int n = 150 + r.nextInt(80);
            for (int k = 0; k < n; k++) {
                float[] row = c.add(k / 12, k);
                for (int i = 0; i < dim; i++) row[i] = (float) r.nextGaussian();
            }
            cands[d] = c;
        }
        MatchKernel kernel = MatchKernel.panama();
        SdrScorer scorer = new SdrScorer(source, kernel);
        double sink = 0;
        long[] times = new long[30];
        for (int rep = 0; rep < 40; rep++) {
            long t0 = System.nanoTime();
            for (CandidateSentences c : cands) sink += scorer.score(c);
            if (rep >= 10) times[rep - 10] = System.nanoTime() - t0;
        }
        Arrays.sort(times);
        System.out.printf("%s: window of %d, median %.1f ms, min %.1f ms (%.3f)%n", kernel.name(), docs, times[15] / 1e6, times[0] / 1e6, sink);
    }
}
