/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Exact SDR of one source against one candidate at a time (SPEC, "Two-stage score"):
 *
 * <pre>
 *   P_ij = (1/|s_i|) sum_k max_r dot(s_i^k, c_j^r)
 *   S    = (1/n) sum_i max_j (P_ij - mu_i) / sigma_i      (sigma_i &lt; 1e-6 counts as 1)
 * </pre>
 *
 * Candidate paragraphs are the groups of sentences with one {@code paragraph} value, in ascending
 * order of that value; inside a paragraph, sentences are in {@code position} order. Ties (an equal
 * max) go to the first paragraph / sentence in that order, as numpy's argmax does in the Python
 * reference. Dot products are float32, through a {@link MatchKernel} (a register-tiled vector-API
 * kernel where the JVM has the vector module, else Lucene's {@code VectorUtil}); the sums and the
 * normalisation are double.
 *
 * <p>A candidate with no sentence has no SDR score (the max over an empty set is -infinity):
 * {@link #score} returns {@link Double#NEGATIVE_INFINITY}.
 *
 * <p>Not thread-safe: it keeps scratch arrays; one instance per rescoring pass.
 */
final class SdrScorer {
    private final SdrSource source;
    private final MatchKernel kernel;
    private final int n;          // source paragraphs
    private final int sentences;  // source sentences
    // scratch, grown as needed
    private float[] best = new float[0];     // [k * groups + g]: max_r dot(s^k, c_g^r)
    private int[] bestAt = new int[0];       // [k * groups + g]: the sorted index t of that r
    private Integer[] order = new Integer[0];
    private int[] sorted = new int[0];       // sorted index t -> sentence r
    private int[] groupOf = new int[0];      // sorted index t -> its group g
    private int[] groupStart = new int[1];   // group g holds sorted[groupStart[g] .. groupStart[g + 1])
    private int groups;
    // the last computed per-paragraph result
    private final int[] bestGroup;
    private final double[] bestP;
    private final double[] bestZ;
    // charged when the scratch grows (null: not charged); it grows with the candidates' sizes, up to source
    // sentences x candidate paragraphs cells
    private java.util.function.LongConsumer budget;

    SdrScorer(SdrSource source) {
        this(source, MatchKernel.create());
    }

    /** Charges every growth of the scratch to {@code budget} (a breaker; it may throw before the arrays grow). */
    SdrScorer charging(java.util.function.LongConsumer budget) {
        this.budget = budget;
        return this;
    }

    private void grow(long bytes) {
        if (budget != null) {
            budget.accept(bytes);
        }
    }

    SdrScorer(SdrSource source, MatchKernel kernel) {
        this.source = source;
        this.kernel = kernel;
        this.n = source.paragraphs();
        this.sentences = source.sentences();
        this.bestGroup = new int[n];
        this.bestP = new double[n];
        this.bestZ = new double[n];
    }

    /** S(s, c), or -infinity when the candidate has no sentence. */
    double score(CandidateSentences c) {
        if (c.size() == 0) {
            return Double.NEGATIVE_INFINITY;
        }
        if (c.dim() != source.dim()) {
            throw new IllegalArgumentException("the source vectors have " + source.dim() + " dimensions but the candidate's have "
                + c.dim());
        }
        group(c);
        match(c);
        for (int i = 0; i < n; i++) {
            int from = source.paragraphStart(i);
            int to = source.paragraphStart(i + 1);
            double mu = source.mu(i);
            double sigma = source.sigmaUsed(i);
            double top = Double.NEGATIVE_INFINITY;
            int topGroup = -1;
            double topP = Double.NaN;
            for (int g = 0; g < groups; g++) {
                double sum = 0;
                for (int k = from; k < to; k++) {
                    sum += best[k * groups + g];
                }
                double p = sum / (to - from);
                double z = (p - mu) / sigma;
                if (z > top) {
                    top = z;
                    topGroup = g;
                    topP = p;
                }
            }
            bestGroup[i] = topGroup;
            bestP[i] = topP;
            bestZ[i] = top;
        }
        int[] parts = source.parts();
        if (parts == null) {
            return mean(bestZ, 0, n);
        }
        double total = 0;
        int at = 0;
        for (int part : parts) {
            total += mean(bestZ, at, at + part);
            at += part;
        }
        return total / parts.length;
    }

    private static double mean(double[] values, int from, int to) {
        double sum = 0;
        for (int i = from; i < to; i++) {
            sum += values[i];
        }
        return sum / (to - from);
    }

    /** Orders the candidate's sentences by (paragraph, position, read order) and splits them into paragraph groups. */
    private void group(CandidateSentences c) {
        int m = c.size();
        if (order.length < m) {
            int grown = Math.max(m, order.length * 2);
            grow((long) (grown - order.length) * 28);
            order = new Integer[grown];
            sorted = new int[order.length];
            groupOf = new int[order.length];
        }
        for (int r = 0; r < m; r++) {
            order[r] = r;
        }
        Arrays.sort(order, 0, m, (a, b) -> {
            int cmp = Long.compare(c.paragraph(a), c.paragraph(b));
            if (cmp != 0) {
                return cmp;
            }
            cmp = Long.compare(c.position(a), c.position(b));
            return cmp != 0 ? cmp : Integer.compare(a, b);
        });
        if (groupStart.length < m + 1) {
            groupStart = new int[Math.max(m + 1, groupStart.length * 2)];
        }
        groups = 0;
        for (int t = 0; t < m; t++) {
            sorted[t] = order[t];
            if (t == 0 || c.paragraph(sorted[t]) != c.paragraph(sorted[t - 1])) {
                groupStart[groups++] = t;
            }
            groupOf[t] = groups - 1;
        }
        groupStart[groups] = m;
    }

    /** best[k][g] = max over group g's sentences of dot(s^k, c^r), bestAt the first sorted index t reaching it. */
    private void match(CandidateSentences c) {
        long wanted = (long) sentences * groups;
        if (wanted > Integer.MAX_VALUE - 16) {
            throw new IllegalArgumentException("a candidate of " + groups + " paragraphs against " + sentences
                + " source sentences is more than one scorer can hold");
        }
        int cells = (int) wanted;
        if (best.length < cells) {
            int grown = (int) Math.min(Integer.MAX_VALUE - 16, Math.max((long) cells, best.length * 2L));
            grow((long) (grown - best.length) * 8);
            best = new float[grown];
            bestAt = new int[best.length];
        }
        kernel.match(source, c.rows(), sorted, groupOf, c.size(), groups, best, bestAt);
    }

    /** The kernel's name. */
    String kernel() {
        return kernel.name();
    }

    /**
     * The score and, for every source paragraph i in order, its best candidate paragraph j (the
     * candidate's {@code paragraph} value), P_ij, N_ij = (P_ij - mu_i) / sigma_i, and for each source
     * sentence k of paragraph i its best sentence r in candidate paragraph j (r counts inside the
     * paragraph in position order; {@code candidate_position} is the stored position) and their dot
     * product. See README.md, "Response".
     */
    Map<String, Object> explain(CandidateSentences c) {
        return breakdown(c, score(c));
    }

    /**
     * The breakdown {@link #explain} gives, from what {@link #score} just computed for {@code c} (its
     * {@code score}): no dot product again. Valid until the next score.
     */
    Map<String, Object> breakdown(CandidateSentences c, double score) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("score", c.size() == 0 ? null : score);
        out.put("sentences", c.size());
        out.put("paragraphs", c.size() == 0 ? 0 : groups);
        List<Object> rows = new ArrayList<>(n);
        if (c.size() > 0) {
            for (int i = 0; i < n; i++) {
                int g = bestGroup[i];
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("source_paragraph", i);
                row.put("candidate_paragraph", c.paragraph(sorted[groupStart[g]]));
                row.put("paragraph_score", bestP[i]);
                row.put("normalised_score", bestZ[i]);
                List<Object> pairs = new ArrayList<>();
                int from = source.paragraphStart(i);
                for (int k = from; k < source.paragraphStart(i + 1); k++) {
                    int cell = k * groups + g;
                    int t = bestAt[cell];
                    Map<String, Object> pair = new LinkedHashMap<>();
                    pair.put("source_sentence", k - from);
                    pair.put("candidate_sentence", t - groupStart[g]);
                    pair.put("candidate_position", c.position(sorted[t]));
                    pair.put("cosine", (double) best[cell]);
                    pairs.add(pair);
                }
                row.put("sentence_pairs", pairs);
                rows.add(row);
            }
        }
        out.put("source_paragraphs", rows);
        return out;
    }
}
