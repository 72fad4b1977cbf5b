/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.FloatVectorValues;
import org.apache.lucene.index.KnnVectorValues;
import org.apache.lucene.index.LeafReader;

import java.io.IOException;

/**
 * A forward-only cursor over one segment's float vectors of one field (Lucene 10: a doc-id iterator
 * that gives each document's vector ordinal, and the values read by ordinal). One of the four classes
 * whose code differs between the 3.x line and the 2.x line (Lucene 9, {@code src/main/lucene9}; pom.xml
 * names them); both copies offer the same methods.
 */
final class VectorCursor {
    static final int NO_MORE_DOCS = Integer.MAX_VALUE;

    private final FloatVectorValues values;
    private final KnnVectorValues.DocIndexIterator iterator;

    private VectorCursor(FloatVectorValues values) {
        this.values = values;
        this.iterator = values.iterator();
    }

    /** The cursor over {@code field} in {@code reader}, or null when the segment has no vector of it. */
    static VectorCursor open(LeafReader reader, String field) throws IOException {
        FloatVectorValues values = reader.getFloatVectorValues(field);
        return values == null ? null : new VectorCursor(values);
    }

    int dimension() {
        return values.dimension();
    }

    /** The current document, -1 before the first call of {@link #advance}/{@link #nextDoc}. */
    int docID() {
        return iterator.docID();
    }

    /** The first document at or after {@code target} that has a vector (target must be greater than {@link #docID()}). */
    int advance(int target) throws IOException {
        return iterator.advance(target);
    }

    int nextDoc() throws IOException {
        return iterator.nextDoc();
    }

    /** The current document's vector, copied into {@code into} (length = dimension). */
    void copyVector(float[] into) throws IOException {
        float[] v = values.vectorValue(iterator.index());
        System.arraycopy(v, 0, into, 0, into.length);
    }
}
