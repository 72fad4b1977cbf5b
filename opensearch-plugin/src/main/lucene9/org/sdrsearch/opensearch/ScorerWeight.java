/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Scorer;
import org.apache.lucene.search.Weight;

import java.io.IOException;

/**
 * A {@link Weight} whose subclass builds each segment's {@link Scorer} in {@link #segmentScorer}, on
 * a {@link SegmentScorer}: what differs between release lines in writing a query (DocScoresQuery).
 * Lucene 9 (the 2.x line) asks a weight for {@code scorer(context)}, and a scorer is built with its
 * weight. The 3.x line's copy is in {@code src/main/lucene10}.
 */
abstract class ScorerWeight extends Weight {
    ScorerWeight(Query query) {
        super(query);
    }

    /** The segment's scorer, or null where none of its documents matches. */
    abstract Scorer segmentScorer(LeafReaderContext context) throws IOException;

    @Override
    public final Scorer scorer(LeafReaderContext context) throws IOException {
        return segmentScorer(context);
    }

    /** The base of a {@link ScorerWeight}'s scorers. */
    abstract static class SegmentScorer extends Scorer {
        SegmentScorer(Weight weight) {
            super(weight);
        }
    }
}
