/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.util.Random;

/**
 * The test oracle: SDR written straight from the SPEC formulas with plain loops in double precision
 * (the Java twin of sdr_core/reference.py). A document is {@code [paragraph][sentence][dimension]}.
 */
final class BruteForceSdr {
    private BruteForceSdr() {}

    static double dot(float[] a, float[] b) {
        double s = 0;
        for (int x = 0; x < a.length; x++) {
            s += (double) a[x] * (double) b[x];
        }
        return s;
    }

    /** P_ij = (1/|s_i|) sum_k max_r dot(s_i^k, c_j^r). */
    static double paragraphScore(float[][] source, float[][] candidate) {
        double total = 0;
        for (float[] s : source) {
            double best = Double.NEGATIVE_INFINITY;
            for (float[] c : candidate) {
                best = Math.max(best, dot(s, c));
            }
            total += best;
        }
        return total / source.length;
    }

    /** S = (1/n) sum_i max_j (P_ij - mu_i) / sigma_i, sigma_i &lt; 1e-6 counting as 1; -inf for no candidate paragraph. */
    static double score(float[][][] source, float[][][] candidate, double[] mu, double[] sigma) {
        double total = 0;
        for (int i = 0; i < source.length; i++) {
            double s = sigma[i] < 1e-6 ? 1.0 : sigma[i];
            double best = Double.NEGATIVE_INFINITY;
            for (float[][] c : candidate) {
                best = Math.max(best, (paragraphScore(source[i], c) - mu[i]) / s);
            }
            total += best;
        }
        return total / source.length;
    }

    /** The index j of the best candidate paragraph for source paragraph i (first on ties). */
    static int bestParagraph(float[][] sourceParagraph, float[][][] candidate, double mu, double sigma) {
        double s = sigma < 1e-6 ? 1.0 : sigma;
        int at = -1;
        double best = Double.NEGATIVE_INFINITY;
        for (int j = 0; j < candidate.length; j++) {
            double z = (paragraphScore(sourceParagraph, candidate[j]) - mu) / s;
            if (z > best) {
                best = z;
                at = j;
            }
        }
        return at;
    }

    /** A random unit vector (float32), Gaussian directions. */
    static float[] unit(Random random, int dim) {
        float[] v = new float[dim];
        double norm = 0;
        for (int x = 0; x < dim; x++) {
            v[x] = (float) random.nextGaussian();
            norm += (double) v[x] * v[x];
        }
        norm = Math.sqrt(norm);
        for (int x = 0; x < dim; x++) {
            v[x] = (float) (v[x] / norm);
        }
        return v;
    }

    /** A document with the given paragraph sizes and random unit vectors. */
    static float[][][] document(Random random, int dim, int... sizes) {
        float[][][] doc = new float[sizes.length][][];
        for (int i = 0; i < sizes.length; i++) {
            doc[i] = new float[sizes[i]][];
            for (int k = 0; k < sizes[i]; k++) {
                doc[i][k] = unit(random, dim);
            }
        }
        return doc;
    }

    /** The rows of a document, paragraph after paragraph. */
    static float[][] rows(float[][][] doc) {
        int n = 0;
        for (float[][] p : doc) {
            n += p.length;
        }
        float[][] out = new float[n][];
        int at = 0;
        for (float[][] p : doc) {
            for (float[] v : p) {
                out[at++] = v;
            }
        }
        return out;
    }

    static int[] sizes(float[][][] doc) {
        int[] out = new int[doc.length];
        for (int i = 0; i < doc.length; i++) {
            out[i] = doc[i].length;
        }
        return out;
    }

    /** mu_i / sigma_i of each source paragraph over the paragraphs of {@code corpus} (population std), as the SPEC defines. */
    static double[][] statistics(float[][][] source, float[][][]... corpus) {
        double[] mu = new double[source.length];
        double[] sigma = new double[source.length];
        for (int i = 0; i < source.length; i++) {
            int count = 0;
            double sum = 0;
            for (float[][][] doc : corpus) {
                for (float[][] p : doc) {
                    sum += paragraphScore(source[i], p);
                    count++;
                }
            }
            mu[i] = sum / count;
            double var = 0;
            for (float[][][] doc : corpus) {
                for (float[][] p : doc) {
                    double d = paragraphScore(source[i], p) - mu[i];
                    var += d * d;
                }
            }
            sigma[i] = Math.sqrt(var / count);
        }
        return new double[][] { mu, sigma };
    }
}
