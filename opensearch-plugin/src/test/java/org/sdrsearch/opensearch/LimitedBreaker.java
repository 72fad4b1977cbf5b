/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.core.common.breaker.CircuitBreaker;
import org.opensearch.core.common.breaker.CircuitBreakingException;

import java.util.concurrent.atomic.AtomicLong;

/** A circuit breaker with a fixed limit, as OpenSearch's child breakers count (for the tests of what the plugin charges). */
final class LimitedBreaker implements CircuitBreaker {
    private final long limit;
    private final AtomicLong used = new AtomicLong();
    private final AtomicLong peak = new AtomicLong();
    private final AtomicLong trips = new AtomicLong();

    LimitedBreaker(long limit) {
        this.limit = limit;
    }

    @Override
    public void circuitBreak(String fieldName, long bytesNeeded) {
        trips.incrementAndGet();
        throw new CircuitBreakingException("[test] data for [" + fieldName + "] would be larger than the limit", bytesNeeded, limit,
            Durability.TRANSIENT);
    }

    @Override
    public double addEstimateBytesAndMaybeBreak(long bytes, String label) {
        long now = used.addAndGet(bytes);
        if (now > limit) {
            used.addAndGet(-bytes);
            circuitBreak(label, now);
        }
        peak.accumulateAndGet(now, Math::max);
        return now;
    }

    @Override
    public long addWithoutBreaking(long bytes) {
        return used.addAndGet(bytes);
    }

    @Override
    public long getUsed() {
        return used.get();
    }

    long peak() {
        return peak.get();
    }

    @Override
    public long getLimit() {
        return limit;
    }

    @Override
    public double getOverhead() {
        return 1.0;
    }

    @Override
    public long getTrippedCount() {
        return trips.get();
    }

    @Override
    public String getName() {
        return "test";
    }

    @Override
    public Durability getDurability() {
        return Durability.TRANSIENT;
    }

    @Override
    public void setLimitAndOverhead(long limit, double overhead) {
        throw new UnsupportedOperationException();
    }
}
