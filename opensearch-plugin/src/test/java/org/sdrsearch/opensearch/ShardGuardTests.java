/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.NoMergePolicy;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.search.join.QueryBitSetProducer;
import org.apache.lucene.store.Directory;
import org.apache.lucene.tests.util.LuceneTestCase;
import org.opensearch.common.lease.Releasable;
import org.opensearch.common.lucene.search.Queries;
import org.opensearch.core.common.breaker.CircuitBreakingException;
import org.opensearch.core.tasks.TaskCancelledException;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The plugin's loops under a search's cancellation, time-out and request breaker ({@link ShardGuard}), on a real
 * Lucene index laid out as OpenSearch lays out the nested mapping: the rescorer and the candidate stage stop between
 * two hits / probes once the search is cancelled (on the search thread and on the plugin's pool threads, which then
 * stop too), a timed-out rescore keeps the hits it scored (each with its exact score), a timed-out candidate stage
 * answers none, and what they keep is bounded ({@code sdr.limits.max_explain_pairs}) and charged to the breaker.
 */
public class ShardGuardTests extends LuceneTestCase {
    private static final int N = 60;
    private static final int DIM = 8;

    @Override
    public void tearDown() throws Exception {
        SdrLimits.reset();
        SdrThreads.set(null, 1);
        super.tearDown();
    }

    private Directory index(Random random, List<SdrRescorerTests.Candidate> candidates) throws IOException {
        Directory dir = newDirectory();
        try (IndexWriter writer = new IndexWriter(dir, newIndexWriterConfig().setMergePolicy(NoMergePolicy.INSTANCE))) {
            for (int i = 0; i < N; i++) {
                SdrRescorerTests.Candidate c = new SdrRescorerTests.Candidate("c" + i, BruteForceSdr.document(random, DIM, 3, 2));
                candidates.add(c);
                writer.addDocuments(SdrRescorerTests.block(c, random));
                if (i % 20 == 19) {
                    writer.flush();
                }
            }
        }
        return dir;
    }

    private static SdrRescorerBuilder request(float[][][] source, boolean explain, int explainTop) {
        int n = source.length;
        double[] mu = new double[n];
        double[] sigma = new double[n];
        java.util.Arrays.fill(sigma, 1.0);
        return new SdrRescorerBuilder(SdrSource.of(BruteForceSdr.rows(source), BruteForceSdr.sizes(source), mu, sigma, null),
            null, null, null, explain, explainTop);
    }

    private static SdrRescoreContext context(SdrRescorerBuilder request, int window) {
        return new SdrRescoreContext(window, request, new QueryBitSetProducer(Queries.newNonNestedFilter()));
    }

    /** A guard cancelled from its {@code after}-th check on, counting the checks made after that. */
    private static final class Cancel {
        final AtomicInteger checks = new AtomicInteger();
        final AtomicInteger afterCancel = new AtomicInteger();
        final int after;

        Cancel(int after) {
            this.after = after;
        }

        boolean cancelled() {
            if (checks.incrementAndGet() >= after) {
                afterCancel.incrementAndGet();
                return true;
            }
            return false;
        }
    }

    public void testACancelledRescoreStopsOnEveryThread() throws Exception {
        Random random = new Random(random().nextLong());
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        float[][][] source = BruteForceSdr.document(random, DIM, 2, 3);
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try (Directory dir = index(random, candidates); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            for (int threads : new int[] { 1, 4 }) {
                SdrThreads.set(threads == 1 ? null : pool, threads);
                Cancel cancel = new Cancel(10);
                ShardGuard guard = ShardGuard.forTest(cancel::cancelled, () -> 0L, Long.MAX_VALUE, null, null);
                TopDocs first = searcher.search(Queries.newNonNestedFilter(), N);
                TaskCancelledException e = expectThrows(TaskCancelledException.class, () -> ShardGuard.with(guard,
                    () -> SdrRescorer.INSTANCE.rescore(first, searcher, context(request(source, false, 0), N))));
                assertTrue(e.getMessage(), e.getMessage().startsWith("cancelled task with reason"));
                // each thread that was scoring saw the cancellation once and stopped: no hit scored after it
                assertTrue(threads + " threads: " + cancel.afterCancel.get() + " checks after the cancellation",
                    cancel.afterCancel.get() <= threads);
                assertTrue("stopped long before the window's " + N + " hits", cancel.checks.get() < N);
            }
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    public void testATimedOutRescoreKeepsTheHitsItScored() throws Exception {
        Random random = new Random(random().nextLong());
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        float[][][] source = BruteForceSdr.document(random, DIM, 2, 3);
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try (Directory dir = index(random, candidates); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            Map<Integer, Float> exact = new HashMap<>();
            for (ScoreDoc hit : SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), N), searcher,
                context(request(source, false, 0), N)).scoreDocs) {
                exact.put(hit.doc, hit.score);
            }
            assertEquals(N, exact.size());
            for (int threads : new int[] { 1, 4 }) {
                SdrThreads.set(threads == 1 ? null : pool, threads);
                AtomicLong clock = new AtomicLong();
                // the clock passes the deadline after 15 readings
                ShardGuard guard = ShardGuard.forTest(() -> false, () -> clock.incrementAndGet() > 15 ? 100 : 0, 50, null, null);
                TopDocs first = searcher.search(Queries.newNonNestedFilter(), N);
                TopDocs got = ShardGuard.with(guard, () -> SdrRescorer.INSTANCE.rescore(first, searcher,
                    context(request(source, false, 0), N)));
                assertTrue(threads + " threads: " + got.scoreDocs.length + " hits", got.scoreDocs.length >= 1);
                assertTrue(threads + " threads: " + got.scoreDocs.length + " hits", got.scoreDocs.length < N);
                float previous = Float.POSITIVE_INFINITY;
                for (ScoreDoc hit : got.scoreDocs) {  // only scored hits, each with its exact score, in order
                    assertEquals(exact.get(hit.doc), hit.score, 0f);
                    assertTrue(hit.score <= previous);
                    previous = hit.score;
                }
            }
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }

    public void testExplainedHitsAreBoundedAndCharged() throws Exception {
        Random random = new Random(random().nextLong());
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        float[][][] source = BruteForceSdr.document(random, DIM, 2, 3);  // 5 sentences
        try (Directory dir = index(random, candidates); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            SdrLimits.set(null, null, 50L, null, null);  // 10 hits of 5 sentences
            // explain: every hit of the window when the hits returned are unknown (a window of 11 here)
            IllegalArgumentException e = expectThrows(IllegalArgumentException.class, () -> SdrRescorer.INSTANCE.rescore(
                searcher.search(Queries.newNonNestedFilter(), N), searcher, context(request(source, true, 0), 11)));
            assertTrue(e.getMessage(), e.getMessage().contains("[explain] asks for the breakdowns of 11 hits of 5 source "
                + "sentences each (55 sentence pairs), more than the 50 one request may keep (sdr.limits.max_explain_pairs)"));
            assertEquals(10, SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), N), searcher,
                context(request(source, true, 0), 10)).scoreDocs.length);
            // explain_top: its best n of a larger window (the window itself is not bounded by it)
            e = expectThrows(IllegalArgumentException.class, () -> SdrRescorer.INSTANCE.rescore(
                searcher.search(Queries.newNonNestedFilter(), N), searcher, context(request(source, false, 11), N)));
            assertTrue(e.getMessage(), e.getMessage().contains("[explain_top] asks for the breakdowns of 11 hits"));

            // what is kept is charged for as long as the search lives; the scorers' scratch only while they run
            LimitedBreaker breaker = new LimitedBreaker(1L << 30);
            List<Releasable> atClose = new ArrayList<>();
            ShardGuard guard = ShardGuard.forTest(() -> false, () -> 0L, Long.MAX_VALUE, breaker, atClose::add);
            SdrSource s = request(source, false, 10).source();
            TopDocs got = ShardGuard.with(guard, () -> SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), N),
                searcher, context(request(source, false, 10), N)));
            assertEquals(N, got.scoreDocs.length);
            assertEquals(10 * SdrRescorer.breakdownBytes(s), breaker.getUsed());
            assertTrue(breaker.peak() > breaker.getUsed());  // the scratch, released
            atClose.forEach(Releasable::close);
            assertEquals(0, breaker.getUsed());

            LimitedBreaker small = new LimitedBreaker(5 * SdrRescorer.breakdownBytes(s));
            ShardGuard tight = ShardGuard.forTest(() -> false, () -> 0L, Long.MAX_VALUE, small, r -> { });
            CircuitBreakingException trip = expectThrows(CircuitBreakingException.class, () -> ShardGuard.with(tight,
                () -> SdrRescorer.INSTANCE.rescore(searcher.search(Queries.newNonNestedFilter(), N), searcher,
                    context(request(source, false, 10), N))));
            assertEquals(429, trip.status().getStatus());
        }
    }

    public void testTheCandidateStageStopsWhenCancelledAndAnswersNothingWhenTimedOut() throws Exception {
        Random random = new Random(random().nextLong());
        List<SdrRescorerTests.Candidate> candidates = new ArrayList<>();
        float[][][] source = BruteForceSdr.document(random, DIM, 20, 20);  // 40 probes
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try (Directory dir = index(random, candidates); DirectoryReader reader = DirectoryReader.open(dir)) {
            IndexSearcher searcher = new IndexSearcher(reader);
            BitSetProducer parents = new QueryBitSetProducer(Queries.newNonNestedFilter());
            SdrSource s = request(source, false, 0).source();
            for (int threads : new int[] { 1, 4 }) {
                SdrThreads.set(threads == 1 ? null : pool, threads);
                int oversample = random.nextBoolean() ? 0 : 2;
                assertTrue(searcher.search(new SdrCandidatesQuery("sentences.vector", s, false, 5, 10,
                    CandidateAggregator.Method.VOTES, null, null, 0, parents, oversample), N).scoreDocs.length > 0);
                Cancel cancel = new Cancel(8);
                ShardGuard cancelled = ShardGuard.forTest(cancel::cancelled, () -> 0L, Long.MAX_VALUE, null, null);
                expectThrows(TaskCancelledException.class, () -> ShardGuard.with(cancelled, () -> searcher.search(
                    new SdrCandidatesQuery("sentences.vector", s, false, 5, 10, CandidateAggregator.Method.VOTES, null, null, 0,
                        parents, oversample), N)));
                assertTrue(threads + " threads: " + cancel.afterCancel.get(), cancel.afterCancel.get() <= threads);
                assertTrue(cancel.checks.get() < 40);
                AtomicLong clock = new AtomicLong();
                ShardGuard late = ShardGuard.forTest(() -> false, () -> clock.incrementAndGet() > 5 ? 100 : 0, 50, null, null);
                TopDocs none = ShardGuard.with(late, () -> searcher.search(new SdrCandidatesQuery("sentences.vector", s, false, 5,
                    10, CandidateAggregator.Method.VOTES, null, null, 0, parents, oversample), N));
                assertEquals("a timed-out candidate stage answers no candidate", 0, none.scoreDocs.length);
            }
        } finally {
            pool.shutdown();
            assertTrue(pool.awaitTermination(10, TimeUnit.SECONDS));
        }
    }
}
