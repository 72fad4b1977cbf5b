/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.ReaderUtil;
import org.apache.lucene.search.Explanation;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.TopDocs;
import org.opensearch.search.rescore.RescoreContext;
import org.opensearch.search.query.QueryPhase;
import org.opensearch.search.rescore.Rescorer;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Replaces the score of each hit of the rescore window with its exact SDR score against the
 * request's source, read per segment in doc-id order from the hits' nested sentences. Hits beyond
 * the window are dropped (their first-pass scores are not comparable with SDR scores); a hit
 * without any sentence vector scores {@link #NO_SENTENCES} (SDR's -infinity, as the lowest float,
 * since JSON has no infinity) and so sorts last.
 */
final class SdrRescorer implements Rescorer {
    static final SdrRescorer INSTANCE = new SdrRescorer();

    /** The score of a candidate that has no sentence vector. */
    static final float NO_SENTENCES = -Float.MAX_VALUE;

    /** Score descending, then doc id ascending (Lucene's QueryRescorer order). */
    static final Comparator<ScoreDoc> BY_SCORE = (a, b) -> {
        int cmp = Float.compare(b.score, a.score);
        return cmp != 0 ? cmp : Integer.compare(a.doc, b.doc);
    };

    private SdrRescorer() {}

    /** Fewest candidates in one run of a window split over threads (SdrThreads#run). */
    static final int MIN_CHUNK = 8;

    /**
     * Bytes one breakdown ({@link SdrScorer#explain}: maps of boxed numbers, one per source sentence and paragraph)
     * holds on the heap, estimated: what the request breaker is charged for each breakdown kept.
     */
    static long breakdownBytes(SdrSource source) {
        return 256 + 320L * source.paragraphs() + 360L * source.sentences();
    }

    @Override
    public TopDocs rescore(TopDocs topDocs, IndexSearcher searcher, RescoreContext rescoreContext) throws IOException {
        if (topDocs == null || topDocs.scoreDocs.length == 0) {
            return topDocs;
        }
        SdrRescoreContext context = (SdrRescoreContext) rescoreContext;
        ShardGuard guard = ShardGuard.of(searcher);
        SdrSource source = context.request().source();
        int size = Math.min(topDocs.scoreDocs.length, context.getWindowSize());
        // the breakdowns kept: with explain those of the hits this shard returns (from + size of the search, when known),
        // with explain_top those of its best explain_top; bounded (a 400) and charged for as long as the search lives
        boolean explainAll = context.request().explain();
        int presented = guard.presented();
        int explained = explainAll ? (presented < 0 ? size : Math.min(size, presented))
            : Math.min(context.request().explainTop(), size);
        if (explained > 0) {
            SdrLimits.checkExplainPairs(explainAll ? SdrRescorerBuilder.EXPLAIN : SdrRescorerBuilder.EXPLAIN_TOP, explained,
                source.sentences());
            guard.reserve(explained * breakdownBytes(source), "<sdr explain>");
        }
        ScoreDoc[] window = Arrays.copyOf(topDocs.scoreDocs, size);
        ScoreDoc[] byDoc = window.clone();
        Arrays.sort(byDoc, Comparator.comparingInt(d -> d.doc));
        List<LeafReaderContext> leaves = searcher.getIndexReader().leaves();
        // every hit of the window explained (the hits to present): each hit's breakdown with its score, one hit per chunk
        boolean onePass = explainAll && explained == size;
        // otherwise each run keeps the breakdowns of its best explained hits while it scores (built from the scores just
        // computed): the shard's best are among them, so no hit is scored twice
        Map<Integer, Map<String, Object>> kept = onePass || explained == 0 ? null : new ConcurrentHashMap<>();
        int runs = SdrThreads.runs(size, MIN_CHUNK, context.executor(), context.threads());
        if (kept != null && runs > 1) {  // each run may hold explained breakdowns, besides the ones charged above
            guard.reserve((runs - 1L) * explained * breakdownBytes(source), "<sdr explain>");
        }
        int keep = kept == null ? 0 : explained;
        boolean[] scored = new boolean[size];
        AtomicBoolean timedOut = new AtomicBoolean();
        runInChunks(size, onePass ? 1 : MIN_CHUNK, context, timedOut,
            (from, to) -> score(byDoc, from, to, leaves, context, onePass, guard, scored, timedOut, keep, kept));
        if (timedOut.get() && noneScored(scored)) {  // OpenSearch's own time-out before any hit: the first one still
            score(byDoc, 0, 1, leaves, context, onePass, ShardGuard.NONE, scored, new AtomicBoolean(), 0, null);
        }
        Set<Integer> rescored = new HashSet<>();
        for (int i = 0; i < size; i++) {
            if (scored[i]) {
                rescored.add(byDoc[i].doc);
            }
        }
        if (timedOut.get()) {  // the hits scored so far (each run scores one at least), as OpenSearch keeps what it collected
            window = Arrays.stream(window).filter(hit -> rescored.contains(hit.doc)).toArray(ScoreDoc[]::new);
        }
        Arrays.sort(window, BY_SCORE);
        // the shard's best explained hits: each among the best of the run that scored it (a time-out explains none)
        int top = kept == null || timedOut.get() ? 0 : Math.min(explained, window.length);
        for (int r = 0; r < top; r++) {
            context.explained(window[r].doc, kept.get(window[r].doc));
        }
        if (timedOut.get()) {
            guard.reportTimeout();
        }
        context.setRescoredDocs(rescored);
        return new TopDocs(topDocs.totalHits, window);
    }

    private static boolean noneScored(boolean[] scored) {
        for (boolean s : scored) {
            if (s) {
                return false;
            }
        }
        return true;
    }

    /** A hit scored and its breakdown, built as it was scored. */
    private static final class Kept {
        final ScoreDoc hit;
        final Map<String, Object> breakdown;

        Kept(ScoreDoc hit, Map<String, Object> breakdown) {
            this.hit = hit;
            this.breakdown = breakdown;
        }
    }

    /**
     * Runs {@code work} over [0, size) on this thread and the plugin's pool ({@link SdrThreads#run}); OpenSearch's
     * own time-out, should the search's reader throw it, counts as the plugin's ({@code timedOut}).
     */
    private static void runInChunks(int size, int minChunk, SdrRescoreContext context, AtomicBoolean timedOut,
                                    SdrThreads.Range work) throws IOException {
        try {
            SdrThreads.run(size, minChunk, context.executor(), context.threads(), "scoring SDR", work);
        } catch (QueryPhase.TimeExceededException e) {
            timedOut.set(true);
        }
    }

    /**
     * Scores byDoc[from, to) (doc-id order) in this thread, with its own scorer and segment readers: sets each
     * hit's score and marks it in {@code scored}; {@code explain}: also computes each hit's breakdown (which
     * computes the score) and keeps it for the fetch phase. Between two hits it stops when the search is cancelled (throws) or timed out (sets
     * {@code timedOut}; the first hit of a run is always scored, so a timed-out window keeps one hit at least).
     * The scorer's scratch is charged to the request breaker while the run lasts. {@code keep} &gt; 0 (without
     * {@code explain}): the breakdowns of this run's best {@code keep} hits (in {@link #BY_SCORE}
     * order) go into {@code kept} when the run ends, each built as its hit is scored.
     */
    private static void score(ScoreDoc[] byDoc, int from, int to, List<LeafReaderContext> leaves, SdrRescoreContext context,
                              boolean explain, ShardGuard guard, boolean[] scored, AtomicBoolean timedOut,
                              int keep, Map<Integer, Map<String, Object>> kept)
        throws IOException {
        // this run's best keep hits, the worst first
        PriorityQueue<Kept> best = keep > 0 ? new PriorityQueue<>(keep + 1, (a, b) -> BY_SCORE.compare(b.hit, a.hit)) : null;
        try (ShardGuard.Charges charges = guard.scope("<sdr scoring>")) {
            SdrScorer scorer = new SdrScorer(context.request().source()).charging(charges::add);
            CandidateSentences candidate = new CandidateSentences(context.request().source().dim());
            int leafEnd = 0;
            LeafReaderContext leaf = null;
            CandidateReader reader = null;
            for (int i = from; i < to; i++) {
                guard.checkCancelled();
                if (i > from && (timedOut.get() || guard.timedOut())) {
                    timedOut.set(true);
                    return;
                }
                ScoreDoc hit = byDoc[i];
                if (hit.doc >= leafEnd) {
                    leaf = leaves.get(ReaderUtil.subIndex(hit.doc, leaves));
                    leafEnd = leaf.docBase + leaf.reader().maxDoc();
                    reader = context.reader(leaf);
                }
                reader.read(hit.doc - leaf.docBase, candidate);
                if (explain) {
                    Map<String, Object> breakdown = scorer.explain(candidate);
                    context.explained(hit.doc, breakdown);
                    hit.score = candidate.size() == 0 ? NO_SENTENCES : (float) (double) (Double) breakdown.get("score");
                } else {
                    double score = scorer.score(candidate);
                    hit.score = candidate.size() == 0 ? NO_SENTENCES : (float) score;
                    if (best != null && (best.size() < keep || BY_SCORE.compare(hit, best.peek().hit) < 0)) {
                        best.add(new Kept(new ScoreDoc(hit.doc, hit.score), scorer.breakdown(candidate, score)));
                        if (best.size() > keep) {
                            best.poll();
                        }
                    }
                }
                scored[i] = true;
            }
        } finally {
            if (best != null) {
                for (Kept k : best) {
                    kept.put(k.hit.doc, k.breakdown);
                }
            }
        }
    }

    @Override
    public Explanation explain(int topLevelDocId, IndexSearcher searcher, RescoreContext rescoreContext, Explanation sourceExplanation)
        throws IOException {
        SdrRescoreContext context = (SdrRescoreContext) rescoreContext;
        Map<String, Object> details = explainMap(topLevelDocId, searcher, context);
        SdrSource source = context.request().source();
        if (details.get("score") == null) {
            return Explanation.match(NO_SENTENCES, "sdr: the document has no sentence vector in [" + context.request().field()
                + "], so no SDR score (the lowest float stands for -infinity)");
        }
        List<Explanation> rows = new ArrayList<>();
        for (Object o : (List<?>) details.get("source_paragraphs")) {
            Map<?, ?> row = (Map<?, ?>) o;
            int i = (Integer) row.get("source_paragraph");
            rows.add(Explanation.match((Double) row.get("normalised_score"),
                "source paragraph " + i + ": best candidate paragraph " + row.get("candidate_paragraph")
                    + ", P=" + row.get("paragraph_score") + ", (P - mu) / sigma with mu=" + source.mu(i) + ", sigma="
                    + source.sigmaUsed(i)));
        }
        return Explanation.match((Double) details.get("score"),
            "sdr: mean over " + source.paragraphs() + " source paragraphs of max_j (P_ij - mu_i) / sigma_i over "
                + details.get("paragraphs") + " candidate paragraphs, " + details.get("sentences") + " sentences"
                + " (replaces the first-pass score)",
            rows);
    }

    /** The explanation map of one document ({@link SdrScorer#explain}), by its top-level doc id. */
    static Map<String, Object> explainMap(int topLevelDocId, IndexSearcher searcher, SdrRescoreContext context) throws IOException {
        List<LeafReaderContext> leaves = searcher.getIndexReader().leaves();
        LeafReaderContext leaf = leaves.get(ReaderUtil.subIndex(topLevelDocId, leaves));
        CandidateSentences candidate = new CandidateSentences(context.request().source().dim());
        context.reader(leaf).read(topLevelDocId - leaf.docBase, candidate);
        return new SdrScorer(context.request().source()).explain(candidate);
    }
}
