/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.search.IndexSearcher;
import org.opensearch.action.search.SearchShardTask;
import org.opensearch.common.lease.Releasable;
import org.opensearch.core.common.breaker.CircuitBreaker;
import org.opensearch.core.tasks.TaskCancelledException;
import org.opensearch.search.SearchService;
import org.opensearch.search.internal.SearchContext;
import org.opensearch.search.query.QueryPhaseExecutionException;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;

/**
 * What a shard's search gives the plugin's loops (the candidate probes and their aggregation, the rescorer's
 * scoring, the fetch sub-phase): its cancellation, its time-out, and OpenSearch's {@code request} circuit
 * breaker, so that they behave as OpenSearch's own loops do.
 *
 * <ul>
 *   <li>{@link #checkCancelled}: a cancelled search task (POST _tasks/_cancel, a closed client connection with
 *       {@code search.cancel_after_time_interval} or the request's {@code cancel_after_time_interval}) throws
 *       {@link TaskCancelledException}, as OpenSearch's low-level cancellation does; the plugin's pool threads
 *       check it too, so they stop with the search thread.</li>
 *   <li>{@link #timedOut}: the request's {@code timeout} (measured from the start of the shard's query phase, as
 *       OpenSearch measures it) has passed; the caller stops and reports it ({@link #reportTimeout}: the shard
 *       answers {@code timed_out: true} with what it has, or fails it when partial results are not allowed).</li>
 *   <li>{@link #reserve}: bytes that live as long as the shard's search context, charged to the request
 *       breaker (a {@code circuit_breaking_exception}, HTTP 429, when the node is short of memory) and released
 *       when the context is released, as aggregations charge theirs; {@link #scope}: bytes released at the end
 *       of a block.</li>
 * </ul>
 *
 * <p>OpenSearch gives a plugin's query, rescorer and fetch sub-phase no handle on the search context, so
 * {@link SdrSearchListener} (a search operation listener on every index) hands it over: it sets this thread's
 * guard when a shard's query or fetch phase starts and clears it when the phase ends. {@link #of} returns it
 * only for the searcher of that context (never a guard left from another search), else {@link #NONE}: no
 * cancellation, no time-out, no breaker (unit tests, or work OpenSearch runs outside those phases).
 */
final class ShardGuard {
    static final ShardGuard NONE = new ShardGuard(null, () -> false, () -> "", () -> 0L, Long.MAX_VALUE, null, null, null);

    private static final ThreadLocal<Deque<ShardGuard>> CURRENT = ThreadLocal.withInitial(ArrayDeque::new);

    private final IndexSearcher searcher;         // the context's searcher (null: any)
    private final BooleanSupplier cancelled;
    private final java.util.function.Supplier<String> reason;
    private final LongSupplier clock;             // ms
    private final long deadline;                  // ms on clock; Long.MAX_VALUE: none
    private final CircuitBreaker breaker;         // request breaker (null: none)
    private final java.util.function.Consumer<Releasable> onClose;  // releases with the context (null: none)
    private final SearchContext context;          // null outside a node

    private ShardGuard(IndexSearcher searcher, BooleanSupplier cancelled, java.util.function.Supplier<String> reason,
                       LongSupplier clock, long deadline, CircuitBreaker breaker,
                       java.util.function.Consumer<Releasable> onClose, SearchContext context) {
        this.searcher = searcher;
        this.cancelled = cancelled;
        this.reason = reason;
        this.clock = clock;
        this.deadline = deadline;
        this.breaker = breaker;
        this.onClose = onClose;
        this.context = context;
    }

    /** The guard of a shard's search context: its task, its time-out from {@code start} (ms), its request breaker. */
    static ShardGuard of(SearchContext context, boolean withTimeout) {
        long deadline = Long.MAX_VALUE;
        if (withTimeout && context.scrollContext() == null && context.timeout() != null
            && context.timeout().equals(SearchService.NO_TIMEOUT) == false) {
            deadline = context.getRelativeTimeInMillis() + context.timeout().millis();
        }
        CircuitBreaker breaker = null;
        if (context.bigArrays() != null && context.bigArrays().breakerService() != null) {
            breaker = context.bigArrays().breakerService().getBreaker(CircuitBreaker.REQUEST);
        }
        return new ShardGuard(context.searcher(), context::isCancelled, () -> {
            SearchShardTask task = context.getTask();
            return task == null ? "" : task.getReasonCancelled();
        }, context::getRelativeTimeInMillis, deadline, breaker, context::addReleasable, context);
    }

    /** A guard for tests: {@code cancelled} and the {@code clock} (ms) against {@code deadline}; charges to {@code breaker}. */
    static ShardGuard forTest(BooleanSupplier cancelled, LongSupplier clock, long deadline, CircuitBreaker breaker,
                              java.util.function.Consumer<Releasable> onClose) {
        return new ShardGuard(null, cancelled, () -> "test", clock, deadline, breaker, onClose, null);
    }

    // -- this thread's guard ----------------------------------------------------------------------------------

    static void enter(ShardGuard guard) {
        CURRENT.get().push(guard);
    }

    static void exit() {
        Deque<ShardGuard> stack = CURRENT.get();
        if (stack.isEmpty() == false) {
            stack.pop();
        }
    }

    /** This thread's guard if it belongs to {@code searcher}'s search context, else {@link #NONE}. */
    static ShardGuard of(IndexSearcher searcher) {
        ShardGuard guard = CURRENT.get().peek();
        if (guard == null || (guard.searcher != null && guard.searcher != searcher)) {
            return NONE;
        }
        return guard;
    }

    /** For tests: runs {@code work} with {@code guard} as this thread's guard. */
    static <T, E extends Exception> T with(ShardGuard guard, CheckedSupplier<T, E> work) throws E {
        enter(guard);
        try {
            return work.get();
        } finally {
            exit();
        }
    }

    @FunctionalInterface
    interface CheckedSupplier<T, E extends Exception> {
        T get() throws E;
    }

    // -- cancellation and time-out ----------------------------------------------------------------------------

    /** Throws {@link TaskCancelledException} when the search was cancelled (any thread may call it). */
    void checkCancelled() {
        if (cancelled.getAsBoolean()) {
            throw new TaskCancelledException("cancelled task with reason: " + reason.get());
        }
    }

    /** Whether the request's time-out has passed. */
    boolean timedOut() {
        return deadline != Long.MAX_VALUE && clock.getAsLong() > deadline;
    }

    /** Whether this guard has a time-out at all. */
    boolean hasTimeout() {
        return deadline != Long.MAX_VALUE;
    }

    /**
     * After a loop stopped at the time-out: the shard's result says {@code timed_out: true} (the hits it has are
     * kept, as OpenSearch keeps those collected before its own time-out), or, when the request does not allow
     * partial results, the shard fails as OpenSearch's query phase fails it ("Time exceeded").
     */
    void reportTimeout() {
        if (context == null) {
            return;
        }
        if (context.request() != null && context.request().allowPartialSearchResults() == false) {
            throw new QueryPhaseExecutionException(context.shardTarget(), "Time exceeded");
        }
        context.queryResult().searchTimedOut(true);
    }

    /**
     * Inside the query phase's search (the candidate stage builds its weight there): the shard's search timed out,
     * which OpenSearch's query phase then reports as its own time-out does ({@code timed_out: true}, or the shard
     * fails when partial results are not allowed).
     */
    void markTimedOut() {
        if (context != null) {
            context.setSearchTimedOut(true);
        }
    }

    /** from + size of the search (the hits a shard returns), or -1 when unknown. */
    int presented() {
        if (context == null) {
            return -1;
        }
        long n = (long) Math.max(0, context.from()) + Math.max(0, context.size());
        return (int) Math.min(Integer.MAX_VALUE, n);
    }

    /** How many hits this shard's fetch phase loads, or -1 when unknown. */
    int hitsToFetch() {
        return context == null ? -1 : context.docIdsToLoadSize();
    }

    // -- memory -------------------------------------------------------------------------------------------------

    /**
     * Charges {@code bytes} to the request breaker for as long as the search context lives (a 429
     * {@code circuit_breaking_exception} when the node is short of memory); released with the context.
     */
    void reserve(long bytes, String label) {
        if (breaker == null || bytes <= 0) {
            return;
        }
        breaker.addEstimateBytesAndMaybeBreak(bytes, label);
        if (onClose != null) {
            onClose.accept(() -> breaker.addWithoutBreaking(-bytes));
        } else {
            breaker.addWithoutBreaking(-bytes);  // nothing to release it with: a check only
        }
    }

    /**
     * Charges that live as long as the search context (released with it), added to as work goes on: one entry in
     * the context however many times it is added to.
     */
    Charges contextCharges(String label) {
        Charges charges = new Charges(breaker, label);
        if (breaker != null) {
            if (onClose != null) {
                onClose.accept(charges);
            } else {
                return new Charges(null, label);  // nothing to release them with: not charged
            }
        }
        return charges;
    }

    /** Charges released when the returned scope is closed (transient work memory). */
    Charges scope(String label) {
        return new Charges(breaker, label);
    }

    /** Bytes charged to a breaker until {@link #close}; thread-safe. */
    static final class Charges implements Releasable {
        private final CircuitBreaker breaker;
        private final String label;
        private final AtomicLong held = new AtomicLong();

        Charges(CircuitBreaker breaker, String label) {
            this.breaker = breaker;
            this.label = label;
        }

        /** Charges {@code bytes} more (may trip the breaker: nothing is then added). */
        void add(long bytes) {
            if (breaker == null || bytes <= 0) {
                return;
            }
            breaker.addEstimateBytesAndMaybeBreak(bytes, label);
            held.addAndGet(bytes);
        }

        long held() {
            return held.get();
        }

        @Override
        public void close() {
            long bytes = held.getAndSet(0);
            if (breaker != null && bytes > 0) {
                breaker.addWithoutBreaking(-bytes);
            }
        }
    }
}
