/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.index.shard.SearchOperationListener;
import org.opensearch.search.internal.SearchContext;

/**
 * Hands each shard's search context to the plugin's code that runs in it ({@link ShardGuard}): OpenSearch calls
 * a search operation listener on the thread that runs a shard's query phase and its fetch phase, before and
 * after each, and the plugin's query (its candidate stage runs when the query phase builds its weight), its
 * rescorer (run at the end of the query phase) and its fetch sub-phase run on that thread in between. Added to
 * every index ({@link SdrPlugin#onIndexModule}).
 */
final class SdrSearchListener implements SearchOperationListener {
    static final SdrSearchListener INSTANCE = new SdrSearchListener();

    private SdrSearchListener() {}

    @Override
    public void onPreQueryPhase(SearchContext context) {
        ShardGuard.enter(ShardGuard.of(context, true));
    }

    @Override
    public void onQueryPhase(SearchContext context, long tookInNanos) {
        ShardGuard.exit();
    }

    @Override
    public void onFailedQueryPhase(SearchContext context) {
        ShardGuard.exit();
    }

    @Override
    public void onPreFetchPhase(SearchContext context) {
        ShardGuard.enter(ShardGuard.of(context, false));  // OpenSearch does not time a fetch out; it cancels it
    }

    @Override
    public void onFetchPhase(SearchContext context, long tookInNanos) {
        ShardGuard.exit();
    }

    @Override
    public void onFailedFetchPhase(SearchContext context) {
        ShardGuard.exit();
    }
}
