/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.util.Arrays;

/**
 * {@link MatchKernel} on the JDK's vector API, with the <em>source</em> sentences as the lanes: the
 * source is transposed once per request into blocks of L lanes (L = the preferred vector's float
 * count: 16 with AVX-512, 8 with AVX2), so that {@code block[b][x]} holds dimension x of source
 * sentences bL..bL+L-1. One pass over the dimension computes the dot products of 4 candidate
 * sentences (broadcast) with 2 source blocks in 8 accumulator vectors (a matrix-product micro-kernel:
 * each loaded block row is used 4 times, each broadcast value twice), and each result vector, whose
 * lanes are L source sentences against one candidate sentence of one candidate paragraph, is folded
 * into that paragraph's maxima with one vector compare and blend: the per-paragraph maximum is taken
 * across candidate sentences, lane by lane, with no horizontal step. (The first version had the
 * candidate sentences as lanes: each L-wide result then spanned several candidate paragraphs and was
 * folded one lane at a time, a third of the kernel's time on IRLeD; it also transposed every
 * candidate.) The 4 candidate sentences of a pass are first copied one after the other into one small
 * array: read from four arrays, the same loop ran 1.7x slower under Java 25's C2 (a window of 100 in a
 * plain JVM, {@code bench/experiments/plugin_kernel}: 60-68 against 35-38 ms; Java 17 33-35 either way).
 * Compiled apart ({@code src/main/vector}, {@code --add-modules jdk.incubator.vector}) and loaded by
 * reflection only when the module is present.
 */
final class PanamaMatchKernel extends MatchKernel {
    private static final VectorSpecies<Float> SPECIES = FloatVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Integer> INTS = VectorSpecies.of(int.class, SPECIES.vectorShape());
    private static final int L = SPECIES.length();

    private float[] blocks = new float[0];   // the transposed source, zero-padded to whole blocks
    private SdrSource transposed;
    private int nBlocks;
    private float[] bestLanes = new float[0];  // per (group, block): the L source sentences' best dot product
    private int[] bestAtLanes = new int[0];    // ... and the first candidate sentence t reaching it
    private float[] quad = new float[0];       // 4 candidate sentences in one array (see the class comment)

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
        if (transposed != source) {
            nBlocks = (sentences + L - 1) / L;
            int size = nBlocks * dim * L;
            if (blocks.length < size) {
                blocks = new float[size];
            }
            for (int b = 0; b < nBlocks; b++) {
                int base = b * dim * L;
                for (int l = 0; l < L; l++) {
                    int k = b * L + l;
                    float[] v = k < sentences ? source.vector(k) : null;
                    for (int x = 0; x < dim; x++) {
                        blocks[base + x * L + l] = v == null ? 0f : v[x];
                    }
                }
            }
            transposed = source;
        }
        if (quad.length != 4 * dim) {
            quad = new float[4 * dim];
        }
        int cells = groups * nBlocks * L;
        if (bestLanes.length < cells) {
            bestLanes = new float[Math.max(cells, bestLanes.length * 2)];
            bestAtLanes = new int[bestLanes.length];
        }
        Arrays.fill(bestLanes, 0, cells, Float.NEGATIVE_INFINITY);
        Arrays.fill(bestAtLanes, 0, cells, 0);
        int t = 0;
        for (; t + 4 <= m; t += 4) {
            float[] q = quad;  // the 4 candidate sentences, one after the other in one array
            System.arraycopy(rows[sorted[t]], 0, q, 0, dim);
            System.arraycopy(rows[sorted[t + 1]], 0, q, dim, dim);
            System.arraycopy(rows[sorted[t + 2]], 0, q, 2 * dim, dim);
            System.arraycopy(rows[sorted[t + 3]], 0, q, 3 * dim, dim);
            int b = 0;
            for (; b + 2 <= nBlocks; b += 2) {
                fourByTwo(q, b, t, groupOf, dim);
            }
            if (b < nBlocks) {
                fourByOne(q, b, t, groupOf, dim);
            }
        }
        for (; t < m; t++) {
            float[] c = rows[sorted[t]];
            int g = groupOf[t];
            int b = 0;
            for (; b + 2 <= nBlocks; b += 2) {
                oneByTwo(c, b, t, g, dim);
            }
            if (b < nBlocks) {
                oneByOne(c, b, t, g, dim);
            }
        }
        for (int g = 0; g < groups; g++) {
            for (int b = 0; b < nBlocks; b++) {
                int at = (g * nBlocks + b) * L;
                for (int l = 0; l < L; l++) {
                    int k = b * L + l;
                    if (k < sentences) {
                        best[k * groups + g] = bestLanes[at + l];
                        bestAt[k * groups + g] = bestAtLanes[at + l];
                    }
                }
            }
        }
    }

    /** Folds the dot products of candidate sentence t (group g) with source block b into the group's maxima. */
    private void fold(FloatVector dots, int t, int g, int b) {
        int at = (g * nBlocks + b) * L;
        FloatVector current = FloatVector.fromArray(SPECIES, bestLanes, at);
        VectorMask<Float> better = dots.compare(VectorOperators.GT, current);
        if (better.anyTrue()) {  // strictly greater: the first t reaching the maximum keeps it
            current.blend(dots, better).intoArray(bestLanes, at);
            IntVector.fromArray(INTS, bestAtLanes, at).blend(IntVector.broadcast(INTS, t), better.cast(INTS))
                .intoArray(bestAtLanes, at);
        }
    }

    private void fourByTwo(float[] q, int b, int t, int[] groupOf, int dim) {
        int c1 = dim;
        int c2 = 2 * dim;
        int c3 = 3 * dim;
        int o0 = b * dim * L;
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
            FloatVector s0 = FloatVector.fromArray(SPECIES, blocks, o0 + x * L);
            FloatVector s1 = FloatVector.fromArray(SPECIES, blocks, o1 + x * L);
            FloatVector v = FloatVector.broadcast(SPECIES, q[x]);
            a00 = v.fma(s0, a00);
            a01 = v.fma(s1, a01);
            v = FloatVector.broadcast(SPECIES, q[c1 + x]);
            a10 = v.fma(s0, a10);
            a11 = v.fma(s1, a11);
            v = FloatVector.broadcast(SPECIES, q[c2 + x]);
            a20 = v.fma(s0, a20);
            a21 = v.fma(s1, a21);
            v = FloatVector.broadcast(SPECIES, q[c3 + x]);
            a30 = v.fma(s0, a30);
            a31 = v.fma(s1, a31);
        }
        // in t order within each block
        fold(a00, t, groupOf[t], b);
        fold(a10, t + 1, groupOf[t + 1], b);
        fold(a20, t + 2, groupOf[t + 2], b);
        fold(a30, t + 3, groupOf[t + 3], b);
        fold(a01, t, groupOf[t], b + 1);
        fold(a11, t + 1, groupOf[t + 1], b + 1);
        fold(a21, t + 2, groupOf[t + 2], b + 1);
        fold(a31, t + 3, groupOf[t + 3], b + 1);
    }

    private void fourByOne(float[] q, int b, int t, int[] groupOf, int dim) {
        int c1 = dim;
        int c2 = 2 * dim;
        int c3 = 3 * dim;
        int o0 = b * dim * L;
        FloatVector a0 = FloatVector.zero(SPECIES);
        FloatVector a1 = a0;
        FloatVector a2 = a0;
        FloatVector a3 = a0;
        for (int x = 0; x < dim; x++) {
            FloatVector s0 = FloatVector.fromArray(SPECIES, blocks, o0 + x * L);
            a0 = FloatVector.broadcast(SPECIES, q[x]).fma(s0, a0);
            a1 = FloatVector.broadcast(SPECIES, q[c1 + x]).fma(s0, a1);
            a2 = FloatVector.broadcast(SPECIES, q[c2 + x]).fma(s0, a2);
            a3 = FloatVector.broadcast(SPECIES, q[c3 + x]).fma(s0, a3);
        }
        fold(a0, t, groupOf[t], b);
        fold(a1, t + 1, groupOf[t + 1], b);
        fold(a2, t + 2, groupOf[t + 2], b);
        fold(a3, t + 3, groupOf[t + 3], b);
    }

    private void oneByTwo(float[] c, int b, int t, int g, int dim) {
        int o0 = b * dim * L;
        int o1 = o0 + dim * L;
        FloatVector a0 = FloatVector.zero(SPECIES);
        FloatVector a1 = a0;
        for (int x = 0; x < dim; x++) {
            FloatVector v = FloatVector.broadcast(SPECIES, c[x]);
            a0 = v.fma(FloatVector.fromArray(SPECIES, blocks, o0 + x * L), a0);
            a1 = v.fma(FloatVector.fromArray(SPECIES, blocks, o1 + x * L), a1);
        }
        fold(a0, t, g, b);
        fold(a1, t, g, b + 1);
    }

    private void oneByOne(float[] c, int b, int t, int g, int dim) {
        int o0 = b * dim * L;
        FloatVector a0 = FloatVector.zero(SPECIES);
        for (int x = 0; x < dim; x++) {
            a0 = FloatVector.broadcast(SPECIES, c[x]).fma(FloatVector.fromArray(SPECIES, blocks, o0 + x * L), a0);
        }
        fold(a0, t, g, b);
    }
}
