/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Scorer;
import org.apache.lucene.search.ScorerSupplier;
import org.apache.lucene.search.Weight;

import java.io.IOException;

/**
 * A {@link Weight} whose subclass builds each segment's {@link Scorer} in {@link #segmentScorer}, on
 * a {@link SegmentScorer}: what differs between release lines in writing a query (DocScoresQuery).
 * Lucene 10 (the 3.x line) asks a weight for a {@code scorerSupplier(context)}, and a scorer holds no
 * weight. The 2.x line's copy is in {@code src/main/lucene9}.
 */
abstract class ScorerWeight extends Weight {
    ScorerWeight(Query query) {
        super(query);
    }

    /** The segment's scorer, or null where none of its documents matches. */
    abstract Scorer segmentScorer(LeafReaderContext context) throws IOException;

    @Override
    public final ScorerSupplier scorerSupplier(LeafReaderContext context) throws IOException {
        Scorer scorer = segmentScorer(context);
        return scorer == null ? null : new DefaultScorerSupplier(scorer);
    }

    /** The base of a {@link ScorerWeight}'s scorers. */
    abstract static class SegmentScorer extends Scorer {
        SegmentScorer(Weight weight) {  // Lucene 10's Scorer takes no weight
            super();
        }
    }
}
