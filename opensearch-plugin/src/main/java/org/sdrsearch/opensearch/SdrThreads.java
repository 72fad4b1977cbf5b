/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.util.concurrent.OpenSearchExecutors;
import org.opensearch.threadpool.ExecutorBuilder;
import org.opensearch.threadpool.FixedExecutorBuilder;
import org.opensearch.threadpool.ThreadPool;

import java.io.IOException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The node's pool that scores a rescore window (or runs the candidate probes of a query) on several
 * threads: thread pool {@code sdr} (fixed, {@code thread_pool.sdr.size}, default the node's allocated
 * processors; queue {@code thread_pool.sdr.queue_size}, default 1,000), and the node setting
 * {@code sdr.threads}: how many threads one request may use (default: the pool's size; 1 scores
 * in the search thread alone). The search thread always takes part, so a busy pool never blocks a
 * request: it only gets less help.
 */
final class SdrThreads {
    static final String POOL = "sdr";
    static final Setting<Integer> THREADS = Setting.intSetting("sdr.threads", -1, -1, 1024, Setting.Property.NodeScope);

    private static volatile Executor executor;
    private static volatile int threads = 1;

    private SdrThreads() {}

    static ExecutorBuilder<?> builder(Settings settings) {
        int processors = OpenSearchExecutors.allocatedProcessors(settings);
        return new FixedExecutorBuilder(settings, POOL, processors, 1000, "thread_pool." + POOL);
    }

    /** Called once the node's thread pool exists. */
    static void start(ThreadPool pool, Settings settings) {
        int size = pool.info(POOL).getMax();
        int wanted = THREADS.get(settings);
        threads = wanted < 1 ? size : Math.min(wanted, size + 1);
        executor = pool.executor(POOL);
    }

    /** For tests: a pool and a thread count (null / 1: none). */
    static void set(Executor pool, int count) {
        executor = pool;
        threads = Math.max(1, count);
    }

    static Executor executor() {
        return executor;
    }

    /** Work on the items [from, to) of a request (sentences to probe, hits to score). */
    @FunctionalInterface
    interface Range {
        void run(int from, int to) throws IOException;
    }

    /**
     * Runs {@code work} over [0, size): in this thread alone when there is no pool, one thread, or too few items;
     * else split into one run of consecutive items per thread (at least {@code minRun} items each), taken by this
     * thread and up to {@code threads - 1} tasks on {@code executor} until none is left; then this thread waits for
     * the runs taken by others. (Four runs per thread, for windows of long-tailed candidate sizes, measured the same
     * on IRLeD: 95-98 against 94-108 ms for the exact search of 100, 123-125 against 124-136 for the candidates.) A task that starts late finds
     * nothing to do, so a busy pool only slows a request down to this thread's pace: it never blocks it. The first
     * failure of any run is thrown here ({@link #rethrow}); runs not started after it are skipped.
     */
    static void run(int size, int minRun, Executor executor, int threads, String what, Range work) throws IOException {
        int runs = runs(size, minRun, executor, threads);
        if (runs == 1) {
            work.run(0, size);
            return;
        }
        AtomicInteger next = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(runs);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Runnable drain = () -> {
            int r;
            while ((r = next.getAndIncrement()) < runs) {
                try {
                    if (failure.get() == null) {
                        work.run((int) ((long) r * size / runs), (int) ((long) (r + 1) * size / runs));
                    }
                } catch (Throwable t) {
                    failure.compareAndSet(null, t);
                } finally {
                    done.countDown();
                }
            }
        };
        for (int h = 1; h < runs; h++) {
            try {
                executor.execute(drain);
            } catch (RejectedExecutionException e) {
                break;  // the pool is full: this thread does the rest
            }
        }
        drain.run();
        try {
            done.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while " + what, e);
        }
        rethrow(failure.get());
    }

    /** How many runs {@link #run} splits {@code size} items into: 1 without a pool or a second thread, else at most one per thread. */
    static int runs(int size, int minRun, Executor executor, int threads) {
        return executor == null || threads <= 1 ? 1 : Math.max(1, Math.min(size / Math.max(1, minRun), threads));
    }

    /** Throws {@code t} as it is (IOException, RuntimeException, Error), else wrapped; nothing for null. */
    static void rethrow(Throwable t) throws java.io.IOException {
        if (t instanceof java.io.IOException) {
            throw (java.io.IOException) t;
        }
        if (t instanceof RuntimeException) {
            throw (RuntimeException) t;
        }
        if (t instanceof Error) {
            throw (Error) t;
        }
        if (t != null) {
            throw new java.io.IOException(t);
        }
    }

    static int threads() {
        return executor == null ? 1 : threads;
    }
}
