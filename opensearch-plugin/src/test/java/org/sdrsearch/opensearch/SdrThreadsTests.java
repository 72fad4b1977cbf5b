/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;

import java.io.IOException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicInteger;

/** {@link SdrThreads#run}: every item once, runs of at least minRun items, a rejecting pool, a failure thrown as itself. */
public class SdrThreadsTests extends LuceneTestCase {
    public void testEveryItemRunsOnceInRunsOfAtLeastMinRun() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try {
            for (int trial = 0; trial < 200; trial++) {
                int size = TestUtil.nextInt(random(), 0, 300);
                int minRun = TestUtil.nextInt(random(), 1, 20);
                int threads = TestUtil.nextInt(random(), 1, 5);
                AtomicIntegerArray seen = new AtomicIntegerArray(Math.max(1, size));
                AtomicInteger runs = new AtomicInteger();
                AtomicInteger shortRuns = new AtomicInteger();
                SdrThreads.run(size, minRun, random().nextInt(5) == 0 ? null : pool, threads, "testing", (from, to) -> {
                    runs.incrementAndGet();
                    if (to - from < minRun) {
                        shortRuns.incrementAndGet();
                    }
                    for (int i = from; i < to; i++) {
                        seen.incrementAndGet(i);
                    }
                });
                for (int i = 0; i < size; i++) {
                    assertEquals("item " + i + " of " + size, 1, seen.get(i));
                }
                assertTrue(runs.get() <= Math.max(1, threads));
                assertTrue("a run shorter than " + minRun + " in a split of " + size, runs.get() == 1 || shortRuns.get() == 0);
            }
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    public void testARejectingPoolLeavesTheWorkToTheCaller() throws Exception {
        int[] seen = new int[100];
        SdrThreads.run(100, 4, task -> { throw new RejectedExecutionException("full"); }, 4, "testing", (from, to) -> {
            for (int i = from; i < to; i++) {
                seen[i]++;
            }
        });
        for (int i = 0; i < 100; i++) {
            assertEquals(1, seen[i]);
        }
    }

    public void testAFailureIsThrownAsItself() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
            IOException io = expectThrows(IOException.class, () -> SdrThreads.run(64, 1, pool, 3, "testing", (from, to) -> {
                if (from <= 40 && 40 < to) {
                    throw new IOException("run with item 40");
                }
            }));
            assertEquals("run with item 40", io.getMessage());
            IllegalArgumentException bad = expectThrows(IllegalArgumentException.class,
                () -> SdrThreads.run(64, 1, pool, 3, "testing", (from, to) -> {
                    throw new IllegalArgumentException("bad input");
                }));
            assertEquals("bad input", bad.getMessage());
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }
}
