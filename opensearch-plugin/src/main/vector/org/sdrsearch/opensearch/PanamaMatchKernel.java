/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorSpecies;

import java.util.Arrays;

/**
 * {@link MatchKernel} on the JDK's vector API: the candidate's sentences are copied into blocks of
 * L lanes (L = the preferred vector's float count: 16 with AVX-512, 8 with AVX2), transposed, so that
 * {@code block[b][x]} holds dimension x of sentences bL..bL+L-1. One pass over the dimension then
 * computes the dot products of 4 source sentences with 2 blocks (8 accumulator vectors, one
 * broadcast source value and one loaded block row reused 2 and 4 times: a matrix-product
 * micro-kernel), and the L-wide results are folded into the per-paragraph maxima. Compiled apart
 * ({@code src/main/vector}, {@code --add-modules jdk.incubator.vector}) and loaded by reflection only
 * when the module is present.
 */
final class PanamaMatchKernel extends MatchKernel {
    private static final VectorSpecies<Float> SPECIES = FloatVector.SPECIES_PREFERRED;
    private static final int L = SPECIES.length();
    private static final int ROWS = 4;

    private float[] blocks = new float[0];    // transposed candidate, zero-padded to whole blocks
    private float[] flat = new float[0];      // the source rows, row-major
    private SdrSource flattened;
    private final float[] dots = new float[ROWS * 2 * L];

    /** Null when this JVM can run the kernel well, else why not. */
    static String unusable() {
        if (SPECIES.vectorBitSize() < 256) {
            return "the preferred vector size is " + SPECIES.vectorBitSize() + " bits";
        }
        return null;
    }

    @Override
    String name() {
        return "vector API, " + SPECIES.vectorBitSize() + "-bit";
    }

    @Override
    void match(SdrSource source, float[][] rows, int[] sorted, int[] groupOf, int m, int groups, float[] best, int[] bestAt) {
        int dim = source.dim();
        int sentences = source.sentences();
        if (flattened != source) {
            if (flat.length < sentences * dim) {
                flat = new float[sentences * dim];
            }
            for (int k = 0; k < sentences; k++) {
                System.arraycopy(source.vector(k), 0, flat, k * dim, dim);
            }
            flattened = source;
        }
        int nBlocks = (m + L - 1) / L;
        int size = nBlocks * dim * L;
        if (blocks.length < size) {
            blocks = new float[Math.max(size, blocks.length * 2)];
        }
        for (int b = 0; b < nBlocks; b++) {
            int base = b * dim * L;
            for (int l = 0; l < L; l++) {
                int t = b * L + l;
                if (t < m) {
                    float[] v = rows[sorted[t]];
                    for (int x = 0; x < dim; x++) {
                        blocks[base + x * L + l] = v[x];
                    }
                } else {
                    for (int x = 0; x < dim; x++) {
                        blocks[base + x * L + l] = 0f;
                    }
                }
            }
        }
        Arrays.fill(best, 0, sentences * groups, Float.NEGATIVE_INFINITY);
        float[] s = flat;
        int b = 0;
        for (; b + 1 < nBlocks; b += 2) {
            int k = 0;
            for (; k + ROWS <= sentences; k += ROWS) {
                fourByTwo(s, k * dim, blocks, b * dim * L, dim);
                fold(ROWS, 2, k, b, m, groupOf, groups, best, bestAt);
            }
            for (; k < sentences; k++) {
                oneByTwo(s, k * dim, blocks, b * dim * L, dim);
                fold(1, 2, k, b, m, groupOf, groups, best, bestAt);
            }
        }
        if (b < nBlocks) {
            int k = 0;
            for (; k + ROWS <= sentences; k += ROWS) {
                fourByOne(s, k * dim, blocks, b * dim * L, dim);
                fold(ROWS, 1, k, b, m, groupOf, groups, best, bestAt);
            }
            for (; k < sentences; k++) {
                oneByOne(s, k * dim, blocks, b * dim * L, dim);
                fold(1, 1, k, b, m, groupOf, groups, best, bestAt);
            }
        }
    }

    /** Folds the dots of {@code rows} source sentences from k against {@code nb} blocks from b into the maxima, in t order. */
    private void fold(int rows, int nb, int k, int b, int m, int[] groupOf, int groups, float[] best, int[] bestAt) {
        int width = nb * L;
        int first = b * L;
        int count = Math.min(width, m - first);
        for (int i = 0; i < rows; i++) {
            int row = (k + i) * groups;
            int at = i * width;
            for (int q = 0; q < count; q++) {
                float d = dots[at + q];
                int t = first + q;
                int cell = row + groupOf[t];
                if (d > best[cell]) {
                    best[cell] = d;
                    bestAt[cell] = t;
                }
            }
        }
    }

    private void fourByTwo(float[] s, int s0, float[] c, int o0, int dim) {
        int s1 = s0 + dim;
        int s2 = s1 + dim;
        int s3 = s2 + dim;
        int o1 = o0 + dim * L;
        FloatVector a00 = FloatVector.zero(SPECIES);
        FloatVector a01 = a00;
        FloatVector a10 = a00;
        FloatVector a11 = a00;
        FloatVector a20 = a00;
        FloatVector a21 = a00;
        FloatVector a30 = a00;
        FloatVector a31 = a00;
        for (int x = 0; x < dim; x++) {
            FloatVector c0 = FloatVector.fromArray(SPECIES, c, o0 + x * L);
            FloatVector c1 = FloatVector.fromArray(SPECIES, c, o1 + x * L);
            FloatVector v = FloatVector.broadcast(SPECIES, s[s0 + x]);
            a00 = v.fma(c0, a00);
            a01 = v.fma(c1, a01);
            v = FloatVector.broadcast(SPECIES, s[s1 + x]);
            a10 = v.fma(c0, a10);
            a11 = v.fma(c1, a11);
            v = FloatVector.broadcast(SPECIES, s[s2 + x]);
            a20 = v.fma(c0, a20);
            a21 = v.fma(c1, a21);
            v = FloatVector.broadcast(SPECIES, s[s3 + x]);
            a30 = v.fma(c0, a30);
            a31 = v.fma(c1, a31);
        }
        a00.intoArray(dots, 0);
        a01.intoArray(dots, L);
        a10.intoArray(dots, 2 * L);
        a11.intoArray(dots, 3 * L);
        a20.intoArray(dots, 4 * L);
        a21.intoArray(dots, 5 * L);
        a30.intoArray(dots, 6 * L);
        a31.intoArray(dots, 7 * L);
    }

    private void oneByTwo(float[] s, int s0, float[] c, int o0, int dim) {
        int o1 = o0 + dim * L;
        FloatVector a0 = FloatVector.zero(SPECIES);
        FloatVector a1 = a0;
        for (int x = 0; x < dim; x++) {
            FloatVector v = FloatVector.broadcast(SPECIES, s[s0 + x]);
            a0 = v.fma(FloatVector.fromArray(SPECIES, c, o0 + x * L), a0);
            a1 = v.fma(FloatVector.fromArray(SPECIES, c, o1 + x * L), a1);
        }
        a0.intoArray(dots, 0);
        a1.intoArray(dots, L);
    }

    private void fourByOne(float[] s, int s0, float[] c, int o0, int dim) {
        int s1 = s0 + dim;
        int s2 = s1 + dim;
        int s3 = s2 + dim;
        FloatVector a0 = FloatVector.zero(SPECIES);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        for (int x = 0; x < dim; x++) {
            FloatVector c0 = FloatVector.fromArray(SPECIES, c, o0 + x * L);
            a0 = FloatVector.broadcast(SPECIES, s[s0 + x]).fma(c0, a0);
            a1 = FloatVector.broadcast(SPECIES, s[s1 + x]).fma(c0, a1);
            a2 = FloatVector.broadcast(SPECIES, s[s2 + x]).fma(c0, a2);
            a3 = FloatVector.broadcast(SPECIES, s[s3 + x]).fma(c0, a3);
        }
        a0.intoArray(dots, 0);
        a1.intoArray(dots, L);
        a2.intoArray(dots, 2 * L);
        a3.intoArray(dots, 3 * L);
    }

    private void oneByOne(float[] s, int s0, float[] c, int o0, int dim) {
        FloatVector a0 = FloatVector.zero(SPECIES);
        for (int x = 0; x < dim; x++) {
            a0 = FloatVector.broadcast(SPECIES, s[s0 + x]).fma(FloatVector.fromArray(SPECIES, c, o0 + x * L), a0);
        }
        a0.intoArray(dots, 0);
    }
}
