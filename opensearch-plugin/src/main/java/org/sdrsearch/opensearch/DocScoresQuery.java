/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.Explanation;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.QueryVisitor;
import org.apache.lucene.search.ScoreMode;
import org.apache.lucene.search.Scorer;
import org.apache.lucene.search.Weight;

import java.util.Objects;

/**
 * Matches exactly the documents of a {@link DocScores} (top-level doc ids of one reader) with their
 * scores (times the boost): what {@link SdrCandidatesQuery} rewrites to. Valid only for the reader
 * it was computed on (as Lucene's rewritten k-NN queries). How Lucene asks a weight for a segment's
 * scorer differs between release lines: that part is {@link ScorerWeight} (src/main/lucene9 and
 * src/main/lucene10).
 */
final class DocScoresQuery extends Query {
    private final DocScores scores;
    private final Object readerKey;
    private final String description;

    DocScoresQuery(DocScores scores, Object readerKey, String description) {
        this.scores = scores;
        this.readerKey = readerKey;
        this.description = description;
    }

    DocScores scores() {
        return scores;
    }

    /** The reader these documents belong to (its context id). */
    Object readerKey() {
        return readerKey;
    }

    @Override
    public Weight createWeight(IndexSearcher searcher, ScoreMode scoreMode, float boost) {
        if (searcher.getIndexReader().getContext().id() != readerKey) {
            throw new IllegalStateException("sdr_candidates: a rewritten candidate query was run on another reader");
        }
        return new ScorerWeight(this) {
            @Override
            public Explanation explain(LeafReaderContext context, int doc) {
                int at = scores.indexOf(context.docBase + doc);
                if (at < 0) {
                    return Explanation.noMatch("not among the sdr_candidates documents");
                }
                return Explanation.match(scores.scores[at] * boost, description);
            }

            @Override
            Scorer segmentScorer(LeafReaderContext context) {
                int from = scores.lowerBound(context.docBase);
                int to = scores.lowerBound(context.docBase + context.reader().maxDoc());
                if (from >= to) {
                    return null;
                }
                DocScores.Cursor cursor = scores.cursor(from, to, context.docBase);
                float max = scores.maxScore(from, to) * boost;
                return new SegmentScorer(this) {
                    @Override
                    public int docID() {
                        return cursor.docID();
                    }

                    @Override
                    public DocIdSetIterator iterator() {
                        return cursor;
                    }

                    @Override
                    public float getMaxScore(int upTo) {
                        return max;
                    }

                    @Override
                    public float score() {
                        return scores.scores[cursor.index()] * boost;
                    }
                };
            }

            @Override
            public boolean isCacheable(LeafReaderContext context) {
                return false;
            }
        };
    }

    @Override
    public String toString(String field) {
        return "sdr_candidates(" + scores.docs.length + " documents)";
    }

    @Override
    public void visit(QueryVisitor visitor) {
        visitor.visitLeaf(this);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof DocScoresQuery && ((DocScoresQuery) o).scores == scores && ((DocScoresQuery) o).readerKey == readerKey;
    }

    @Override
    public int hashCode() {
        return Objects.hash(System.identityHashCode(scores), System.identityHashCode(readerKey));
    }
}
