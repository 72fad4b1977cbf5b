/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.plugins.Plugin;
import org.opensearch.plugins.SearchPlugin;
import org.opensearch.search.fetch.FetchSubPhase;

import java.util.Collections;
import java.util.List;

/**
 * The {@code sdr} plugin: exact SDR as a rescorer ({@code "rescore": {"sdr": {...}}}) and its
 * per-hit explanation as the {@code _sdr} field. See README.md.
 */
public class SdrPlugin extends Plugin implements SearchPlugin {
    @Override
    public List<RescorerSpec<?>> getRescorers() {
        return Collections.singletonList(
            new RescorerSpec<>(SdrRescorerBuilder.NAME, SdrRescorerBuilder::new, SdrRescorerBuilder::fromXContent)
        );
    }

    @Override
    public List<FetchSubPhase> getFetchSubPhases(FetchPhaseConstructionContext context) {
        return Collections.singletonList(new SdrFetchSubPhase());
    }
}
