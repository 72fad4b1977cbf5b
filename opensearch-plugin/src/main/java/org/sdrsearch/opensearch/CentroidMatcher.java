/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

/**
 * The centroid pre-rank's rows for one request's source centroids: for each source centroid i its best dot
 * product {@code max_j dot(centroid_i, c_j)} with a candidate's paragraph centroids c_j, through
 * {@link MatchKernel} (the register-tiled vector-API kernel where the JVM has it, one group holding every
 * candidate centroid). One dot product per pair ({@link VectorDot}) read each pair's two vectors from memory;
 * the kernel loads each value once per 4 or 2 uses: half the time of the pairwise loop on the demo corpus's
 * 300-document pools (docs/results/opensearch.md). Keeps scratch space: one per fetch (one thread).
 */
final class CentroidMatcher {
    private final MatchKernel kernel;
    private final SdrSource source;
    private final float[] best;
    private final int[] bestAt;
    private int[] sorted = new int[0];
    private int[] groupOf = new int[0];

    /** {@code rows}: the source's paragraph centroids (at least one row, all of one length, finite). */
    CentroidMatcher(float[][] rows) {
        this(rows, MatchKernel.create());
    }

    CentroidMatcher(float[][] rows, MatchKernel kernel) {
        this.kernel = kernel;
        this.source = SdrSource.of(rows, new int[] { rows.length }, new double[1], new double[] { 1.0 }, null);
        this.best = new float[rows.length];
        this.bestAt = new int[rows.length];
    }

    int rows() {
        return best.length;
    }

    /** For each source row its best dot product with {@code own}'s rows (at least one); the array is reused by the next call. */
    float[] best(float[][] own) {
        int m = own.length;
        if (sorted.length < m) {
            sorted = new int[Math.max(m, sorted.length * 2)];
            for (int t = 0; t < sorted.length; t++) {
                sorted[t] = t;
            }
            groupOf = new int[sorted.length];
        }
        kernel.match(source, own, sorted, groupOf, m, 1, best, bestAt);
        return best;
    }
}
