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

import java.util.concurrent.Executor;

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
