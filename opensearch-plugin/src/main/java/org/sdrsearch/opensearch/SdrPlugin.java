/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;
import org.opensearch.core.common.breaker.CircuitBreaker;
import org.opensearch.index.IndexModule;
import org.opensearch.indices.breaker.BreakerSettings;
import org.opensearch.plugins.CircuitBreakerPlugin;
import org.opensearch.plugins.SearchPlugin;
import org.opensearch.search.fetch.FetchSubPhase;
import org.opensearch.threadpool.ExecutorBuilder;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The {@code sdr} plugin: exact SDR as a rescorer ({@code "rescore": {"sdr": {...}}}) with its
 * per-hit explanation as the {@code _sdr} field, SDR's candidate stage as one query
 * ({@code "sdr_candidates"}), and each hit's sentence vectors as the {@code _sdr_vectors} field
 * ({@code "ext": {"sdr_vectors": {}}}). See README.md. Its limits ({@link SdrLimits}) are dynamic cluster
 * settings; its breaker {@code sdr_parse} ({@link ParseBreaker}) charges the sources being parsed; a search
 * operation listener on every index ({@link SdrSearchListener}) gives its loops the search's cancellation,
 * time-out and request breaker ({@link ShardGuard}).
 */
public class SdrPlugin extends SdrPluginBase implements SearchPlugin, CircuitBreakerPlugin {
    @Override
    public List<RescorerSpec<?>> getRescorers() {
        return Collections.singletonList(
            new RescorerSpec<>(SdrRescorerBuilder.NAME, SdrRescorerBuilder::new, SdrRescorerBuilder::fromXContent)
        );
    }

    @Override
    public List<QuerySpec<?>> getQueries() {
        return Collections.singletonList(
            new QuerySpec<>(SdrCandidatesQueryBuilder.NAME, SdrCandidatesQueryBuilder::new, SdrCandidatesQueryBuilder::fromXContent)
        );
    }

    @Override
    public List<SearchExtSpec<?>> getSearchExts() {
        return Collections.singletonList(new SearchExtSpec<>(SdrVectorsExt.NAME, SdrVectorsExt::new, SdrVectorsExt::fromXContent));
    }

    @Override
    public List<FetchSubPhase> getFetchSubPhases(FetchPhaseConstructionContext context) {
        return Collections.singletonList(new SdrFetchSubPhase());
    }

    @Override
    public List<ExecutorBuilder<?>> getExecutorBuilders(Settings settings) {
        return Collections.singletonList(SdrThreads.builder(settings));
    }

    @Override
    public List<Setting<?>> getSettings() {
        List<Setting<?>> settings = new ArrayList<>(SdrLimits.settings());
        settings.add(SdrThreads.THREADS);
        settings.add(ParseBreaker.LIMIT);
        return settings;
    }

    @Override
    public void onIndexModule(IndexModule indexModule) {
        indexModule.addSearchOperationListener(SdrSearchListener.INSTANCE);
    }

    @Override
    public BreakerSettings getCircuitBreaker(Settings settings) {
        return ParseBreaker.settings(settings);
    }

    @Override
    public void setCircuitBreaker(CircuitBreaker circuitBreaker) {
        ParseBreaker.set(circuitBreaker);
    }
}
