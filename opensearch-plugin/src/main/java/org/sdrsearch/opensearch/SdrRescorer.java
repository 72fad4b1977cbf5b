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
import org.opensearch.search.rescore.Rescorer;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

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

    @Override
    public TopDocs rescore(TopDocs topDocs, IndexSearcher searcher, RescoreContext rescoreContext) throws IOException {
        if (topDocs == null || topDocs.scoreDocs.length == 0) {
            return topDocs;
        }
        SdrRescoreContext context = (SdrRescoreContext) rescoreContext;
        int size = Math.min(topDocs.scoreDocs.length, context.getWindowSize());
        ScoreDoc[] window = Arrays.copyOf(topDocs.scoreDocs, size);
        ScoreDoc[] byDoc = window.clone();
        Arrays.sort(byDoc, Comparator.comparingInt(d -> d.doc));
        List<LeafReaderContext> leaves = searcher.getIndexReader().leaves();
        // an explained window (the hits to present) is small and each hit costs more: one hit per chunk
        boolean explainAll = context.request().explain();
        runInChunks(size, explainAll ? 1 : MIN_CHUNK, context,
            (from, to) -> score(byDoc, from, to, leaves, context, explainAll, true));
        Set<Integer> rescored = new HashSet<>();
        for (ScoreDoc hit : byDoc) {
            rescored.add(hit.doc);
        }
        Arrays.sort(window, BY_SCORE);
        int top = explainAll ? 0 : Math.min(context.request().explainTop(), size);
        if (top > 0) {  // the breakdown of this shard's best hits, scored above: read and explained again, one hit per chunk
            ScoreDoc[] best = Arrays.copyOf(window, top);
            Arrays.sort(best, Comparator.comparingInt(d -> d.doc));
            runInChunks(top, 1, context, (from, to) -> score(best, from, to, leaves, context, true, false));
        }
        context.setRescoredDocs(rescored);
        return new TopDocs(topDocs.totalHits, window);
    }

    /** Runs {@code work} over [0, size) on this thread and the plugin's pool ({@link SdrThreads#run}). */
    private static void runInChunks(int size, int minChunk, SdrRescoreContext context, SdrThreads.Range work) throws IOException {
        SdrThreads.run(size, minChunk, context.executor(), context.threads(), "scoring SDR", work);
    }

    /**
     * Scores byDoc[from, to) (doc-id order) in this thread, with its own scorer and segment readers.
     * {@code explain}: computes each hit's breakdown and keeps it for the fetch phase; {@code rescore}: sets
     * each hit's score (from the breakdown when explaining: the breakdown computes it).
     */
    private static void score(ScoreDoc[] byDoc, int from, int to, List<LeafReaderContext> leaves, SdrRescoreContext context,
                              boolean explain, boolean rescore) throws IOException {
        SdrScorer scorer = new SdrScorer(context.request().source());
        CandidateSentences candidate = new CandidateSentences(context.request().source().dim());
        int leafEnd = 0;
        LeafReaderContext leaf = null;
        CandidateReader reader = null;
        for (int i = from; i < to; i++) {
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
                if (rescore) {
                    hit.score = candidate.size() == 0 ? NO_SENTENCES : (float) (double) (Double) breakdown.get("score");
                }
            } else if (rescore) {
                double score = scorer.score(candidate);
                hit.score = candidate.size() == 0 ? NO_SENTENCES : (float) score;
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
