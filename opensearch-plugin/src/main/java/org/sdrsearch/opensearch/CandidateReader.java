/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.DocValues;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.SortedNumericDocValues;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.util.BitSet;

import java.io.IOException;

/**
 * Reads candidates' sentences inside one segment, where they already are: a nested document's
 * children are the documents just before it in doc-id order (Lucene's block join: children, then
 * their parent). For a parent p, the children are the documents after the previous parent, up to p;
 * those that have a vector of the vector field are the sentences. Their paragraph and position come
 * from the numeric doc values of the two nested integer fields.
 *
 * <p>Every iterator here moves forward only: call {@link #read} with increasing parent doc ids
 * (segment-local). One reader per segment and search.
 */
final class CandidateReader {
    private final BitSet parents;               // null: no parent document in this segment
    private final VectorCursor vectors;         // null: no vector in this segment
    private final SortedNumericDocValues paragraphs;
    private final SortedNumericDocValues positions;
    private int lastParent = -1;

    /**
     * @param parents        the non-nested (top-level) documents, e.g. {@code Queries.newNonNestedFilter()}
     * @param vectorField    e.g. {@code sentences.vector}
     * @param paragraphField e.g. {@code sentences.paragraph} (numeric doc values)
     * @param positionField  e.g. {@code sentences.position} (numeric doc values), or null
     * @param dim            the source's dimension: a segment whose vectors have another one is refused
     */
    CandidateReader(LeafReaderContext leaf, BitSetProducer parents, String vectorField, String paragraphField,
                    String positionField, int dim) throws IOException {
        LeafReader reader = leaf.reader();
        this.parents = parents.getBitSet(leaf);
        this.vectors = VectorCursor.open(reader, vectorField);
        if (vectors != null && vectors.dimension() != dim) {
            throw new IllegalArgumentException("the source vectors have " + dim + " dimensions but field [" + vectorField
                + "] has " + vectors.dimension());
        }
        this.paragraphs = DocValues.getSortedNumeric(reader, paragraphField);
        this.positions = positionField == null ? null : DocValues.getSortedNumeric(reader, positionField);
    }

    /**
     * Fills {@code into} with the sentences of parent document {@code parent} (segment-local, increasing between
     * calls), or with {@code into} null only counts them (no vector copied); returns how many there are.
     */
    int read(int parent, CandidateSentences into) throws IOException {
        if (into != null) {
            into.clear();
        }
        if (parent <= lastParent) {
            throw new IllegalStateException("candidates must be read in increasing doc id order: " + parent + " after " + lastParent);
        }
        lastParent = parent;
        if (vectors == null || parents == null || parent == 0) {
            return 0;
        }
        int first = parents.prevSetBit(parent - 1) + 1;  // prevSetBit gives -1 when none
        int doc = vectors.docID();
        if (doc < first) {
            doc = vectors.advance(first);
        }
        int n = 0;
        while (doc < parent) {
            if (into != null) {
                long paragraph = value(paragraphs, doc);
                long position = positions == null ? CandidateSentences.MISSING : value(positions, doc);
                vectors.copyVector(into.add(paragraph, position));
            }
            n++;
            doc = vectors.nextDoc();
        }
        return n;
    }

    private static long value(SortedNumericDocValues values, int doc) throws IOException {
        if (values.docID() <= doc && values.advanceExact(doc) && values.docValueCount() > 0) {
            return values.nextValue();
        }
        return CandidateSentences.MISSING;
    }
}
