/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.util.Arrays;

/**
 * One candidate document's sentences as read from the index: each one's vector, paragraph number
 * and position (in document order, from the nested {@code paragraph} / {@code position} fields; -1
 * where a sentence has no value). Reused from one candidate to the next ({@link #clear}), so the
 * rows are allocated once per search.
 */
final class CandidateSentences {
    static final long MISSING = -1;

    private final int dim;
    private float[][] vectors = new float[0][];
    private long[] paragraphs = new long[16];
    private long[] positions = new long[16];
    private int size;

    CandidateSentences(int dim) {
        this.dim = dim;
    }

    void clear() {
        size = 0;
    }

    /** Adds a sentence; returns the row to copy its vector into (length = dim). */
    float[] add(long paragraph, long position) {
        if (size == paragraphs.length) {
            paragraphs = Arrays.copyOf(paragraphs, size * 2);
            positions = Arrays.copyOf(positions, size * 2);
        }
        if (size == vectors.length) {
            vectors = Arrays.copyOf(vectors, Math.max(16, size * 2));
        }
        if (vectors[size] == null) {
            vectors[size] = new float[dim];
        }
        paragraphs[size] = paragraph;
        positions[size] = position;
        return vectors[size++];
    }

    int size() {
        return size;
    }

    int dim() {
        return dim;
    }

    /** The rows (at least {@link #size} of them; row r is sentence r). */
    float[][] rows() {
        return vectors;
    }

    float[] vector(int r) {
        return vectors[r];
    }

    long paragraph(int r) {
        return paragraphs[r];
    }

    long position(int r) {
        return positions[r];
    }
}
