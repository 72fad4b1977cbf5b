/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.search.DocIdSetIterator;

import java.util.Arrays;

/**
 * Top-level doc ids with a score each, sorted by doc id: what {@link SdrCandidatesQuery} rewrites to
 * ({@code DocScoresQuery} matches exactly these documents with exactly these scores).
 */
final class DocScores {
    final int[] docs;      // ascending, distinct
    final float[] scores;

    DocScores(int[] docs, float[] scores) {
        this.docs = docs;
        this.scores = scores;
    }

    /** Sorts {@code count} (doc, score) pairs by doc. */
    static DocScores of(int[] docs, double[] scores, int count) {
        long[] packed = new long[count];
        for (int i = 0; i < count; i++) {
            packed[i] = ((long) docs[i] << 32) | i;
        }
        Arrays.sort(packed);
        int[] d = new int[count];
        float[] s = new float[count];
        for (int i = 0; i < count; i++) {
            int at = (int) packed[i];
            d[i] = (int) (packed[i] >>> 32);
            s[i] = (float) scores[at];
        }
        return new DocScores(d, s);
    }

    /** The first index whose doc is at least {@code doc}. */
    int lowerBound(int doc) {
        int at = Arrays.binarySearch(docs, doc);
        return at >= 0 ? at : -at - 1;
    }

    /** The index of {@code doc}, or -1. */
    int indexOf(int doc) {
        int at = Arrays.binarySearch(docs, doc);
        return at >= 0 ? at : -1;
    }

    float maxScore(int from, int to) {
        float max = Float.NEGATIVE_INFINITY;
        for (int i = from; i < to; i++) {
            max = Math.max(max, scores[i]);
        }
        return max;
    }

    /** An iterator over docs[from, to) as segment-local ids (minus {@code docBase}); {@link Cursor#index} gives the current entry. */
    Cursor cursor(int from, int to, int docBase) {
        return new Cursor(from, to, docBase);
    }

    final class Cursor extends DocIdSetIterator {
        private final int from;
        private final int to;
        private final int docBase;
        private int at;
        private int doc = -1;

        Cursor(int from, int to, int docBase) {
            this.from = from;
            this.to = to;
            this.docBase = docBase;
            this.at = from - 1;
        }

        int index() {
            return at;
        }

        @Override
        public int docID() {
            return doc;
        }

        @Override
        public int nextDoc() {
            at++;
            doc = at < to ? docs[at] - docBase : NO_MORE_DOCS;
            return doc;
        }

        @Override
        public int advance(int target) {
            int start = Math.max(at + 1, from);
            if (start >= to) {
                at = to;
                doc = NO_MORE_DOCS;
                return doc;
            }
            int i = Arrays.binarySearch(docs, start, to, target + docBase);
            at = i >= 0 ? i : -i - 1;
            doc = at < to ? docs[at] - docBase : NO_MORE_DOCS;
            return doc;
        }

        @Override
        public long cost() {
            return to - from;
        }
    }
}
