/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.search.join.BitSetProducer;
import org.opensearch.search.rescore.RescoreContext;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;

/** What the {@link SdrRescorer} and the {@link SdrFetchSubPhase} need on a shard: the clause and the parent documents. */
final class SdrRescoreContext extends RescoreContext {
    private final SdrRescorerBuilder request;
    private final BitSetProducer parents;
    /** With explain: each rescored hit's breakdown, by top-level doc id, computed with its score (the fetch phase takes them). */
    private final Map<Integer, Map<String, Object>> explained = new ConcurrentHashMap<>();

    SdrRescoreContext(int windowSize, SdrRescorerBuilder request, BitSetProducer parents) {
        super(windowSize, SdrRescorer.INSTANCE);
        this.request = request;
        this.parents = parents;
    }

    SdrRescorerBuilder request() {
        return request;
    }

    /** The pool that helps score a window (null: this thread alone), see {@link SdrThreads}. */
    Executor executor() {
        return SdrThreads.executor();
    }

    /** How many threads may score one window (1: this thread alone). */
    int threads() {
        return SdrThreads.threads();
    }

    /** Keeps the breakdown the rescore computed for the hit {@code topLevelDocId}. */
    void explained(int topLevelDocId, Map<String, Object> breakdown) {
        explained.put(topLevelDocId, breakdown);
    }

    /** The breakdown the rescore computed for the hit {@code topLevelDocId}, removed; null when it did not. */
    Map<String, Object> takeExplained(int topLevelDocId) {
        return explained.remove(topLevelDocId);
    }

    /** A reader of the candidates' sentences in one segment (forward only: one per segment and pass). */
    CandidateReader reader(LeafReaderContext leaf) throws IOException {
        return new CandidateReader(leaf, parents, request.field(), request.paragraphField(), request.positionField(),
            request.source().dim());
    }
}
