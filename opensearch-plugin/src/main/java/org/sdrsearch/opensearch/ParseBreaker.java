/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;
import org.opensearch.core.common.breaker.CircuitBreaker;
import org.opensearch.core.common.unit.ByteSizeValue;
import org.opensearch.indices.breaker.BreakerSettings;

/**
 * The plugin's circuit breaker {@code sdr_parse} (registered through {@code CircuitBreakerPlugin}): it charges
 * the memory a request's source takes while the node parses it (the decoded base64 bytes, then the float rows
 * built from them), where no search context exists yet to charge OpenSearch's request breaker. It is a child of
 * the node's parent breaker, which checks the heap actually in use ({@code indices.breaker.total.use_real_memory},
 * default true): a node short of memory refuses the parse with a 429 {@code circuit_breaking_exception} before it
 * builds the rows. Its own limit, {@code sdr.breaker.parse.limit} (default 40% of the heap), bounds the sources
 * being parsed at one time. The charge is released when the parse ends (README.md, "Limits": the shards charge
 * the request breaker for what they build from it).
 */
final class ParseBreaker {
    static final String NAME = "sdr_parse";
    static final Setting<ByteSizeValue> LIMIT = Setting.memorySizeSetting("sdr.breaker.parse.limit", "40%",
        Setting.Property.NodeScope);

    private static volatile CircuitBreaker breaker;

    private ParseBreaker() {}

    static BreakerSettings settings(Settings settings) {
        return new BreakerSettings(NAME, LIMIT.get(settings).getBytes(), 1.0, CircuitBreaker.Type.MEMORY,
            CircuitBreaker.Durability.TRANSIENT);
    }

    static void set(CircuitBreaker b) {
        breaker = b;
    }

    /** The breaker, or null before the node set it (unit tests). */
    static CircuitBreaker get() {
        return breaker;
    }

    /** Charges released together when the parse ends. */
    static ShardGuard.Charges charges(String label) {
        return new ShardGuard.Charges(breaker, label);
    }
}
