/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

/**
 * Candidate documents from per-sentence nested k-NN hits, scored as the Python engine's
 * {@code reranker/candidates.py} scores them (its docstring defines each aggregation): for source
 * sentence k (row) the hit list is up to k documents with their best sentence's cosine.
 * <ul>
 *   <li>{@code votes}: rows the document appears in;</li>
 *   <li>{@code sum}: the sum of its cosines over those rows;</li>
 *   <li>{@code weighted-sum}: the same with row k of source paragraph i weighted {@code 1 / (n_i sigma_i)}
 *       ({@code 1 / n_i} without statistics);</li>
 *   <li>{@code sdr-bound}: {@code mean_i (A_i - mu_i) / sigma_i} (no normalisation without statistics), where
 *       {@code A_i} is the mean over the rows of paragraph i of the cosine, or, where the document is absent
 *       from a row, that row's lowest returned cosine (0 for a row without hits).</li>
 * </ul>
 * Sums are in double; rows are added in order. Not thread-safe.
 */
final class CandidateAggregator {
    enum Method {
        VOTES, SUM, WEIGHTED_SUM, SDR_BOUND;

        static Method of(String name) {
            switch (name) {
                case "votes": return VOTES;
                case "sum": return SUM;
                case "weighted-sum": return WEIGHTED_SUM;
                case "sdr-bound": return SDR_BOUND;
                default:
                    throw new IllegalArgumentException("[aggregation] must be one of votes, sum, weighted-sum, sdr-bound; got ["
                        + name + "]");
            }
        }

        String label() {
            return name().toLowerCase(Locale.ROOT).replace('_', '-');
        }
    }

    private final Method method;
    private final SdrSource source;
    private final boolean statistics;
    private final int paragraphs;
    private final int[] paragraphOf;           // row -> source paragraph
    private final double[] floorSums;          // sdr-bound: per paragraph, the sum of its rows' floors
    private final Map<Integer, Integer> slots = new HashMap<>();
    private int[] docs = new int[256];
    private double[] sums = new double[256];   // votes / sum / weighted-sum
    private double[] extra = new double[0];    // sdr-bound: [slot * paragraphs + i] = sum over present rows of (cos - floor)

    CandidateAggregator(Method method, SdrSource source, boolean statistics) {
        this.method = method;
        this.source = source;
        this.statistics = statistics;
        this.paragraphs = source.paragraphs();
        this.paragraphOf = new int[source.sentences()];
        for (int i = 0; i < paragraphs; i++) {
            for (int k = source.paragraphStart(i); k < source.paragraphStart(i + 1); k++) {
                paragraphOf[k] = i;
            }
        }
        this.floorSums = new double[paragraphs];
        if (method == Method.SDR_BOUND) {
            extra = new double[256 * paragraphs];
        }
    }

    private int slot(int doc) {
        Integer at = slots.get(doc);
        if (at != null) {
            return at;
        }
        int s = slots.size();
        if (s == docs.length) {
            docs = Arrays.copyOf(docs, s * 2);
            sums = Arrays.copyOf(sums, s * 2);
            if (method == Method.SDR_BOUND) {
                extra = Arrays.copyOf(extra, s * 2 * paragraphs);
            }
        }
        docs[s] = doc;
        slots.put(doc, s);
        return s;
    }

    /** The hits of source sentence {@code row}: {@code n} documents with their cosines (each document once). */
    void add(int row, int[] hitDocs, float[] cosines, int n) {
        int i = paragraphOf[row];
        int size = source.paragraphStart(i + 1) - source.paragraphStart(i);
        switch (method) {
            case VOTES:
                for (int h = 0; h < n; h++) {
                    int at = slot(hitDocs[h]);  // first: slot() may grow sums (sums[slot(..)] would index the old array)
                    sums[at] += 1;
                }
                break;
            case SUM:
                for (int h = 0; h < n; h++) {
                    int at = slot(hitDocs[h]);
                    sums[at] += cosines[h];
                }
                break;
            case WEIGHTED_SUM: {
                double weight = 1.0 / (size * (statistics ? source.sigmaUsed(i) : 1.0));
                for (int h = 0; h < n; h++) {
                    int at = slot(hitDocs[h]);
                    sums[at] += weight * cosines[h];
                }
                break;
            }
            case SDR_BOUND: {
                float floor = 0f;
                if (n > 0) {
                    floor = Float.POSITIVE_INFINITY;
                    for (int h = 0; h < n; h++) {
                        floor = Math.min(floor, cosines[h]);
                    }
                }
                floorSums[i] += floor;
                for (int h = 0; h < n; h++) {
                    int at = slot(hitDocs[h]);
                    extra[at * paragraphs + i] += (double) cosines[h] - floor;
                }
                break;
            }
            default:
                throw new IllegalStateException();
        }
    }

    /** How many documents were seen. */
    int size() {
        return slots.size();
    }

    /** The documents seen (in first-seen order) and their scores; {@code docs} and {@code scores} get {@link #size} values. */
    void result(int[] outDocs, double[] outScores) {
        int count = slots.size();
        System.arraycopy(docs, 0, outDocs, 0, count);
        if (method != Method.SDR_BOUND) {
            System.arraycopy(sums, 0, outScores, 0, count);
            return;
        }
        for (int s = 0; s < count; s++) {
            double total = 0;
            for (int i = 0; i < paragraphs; i++) {
                int size = source.paragraphStart(i + 1) - source.paragraphStart(i);
                double a = (floorSums[i] + extra[s * paragraphs + i]) / size;
                total += statistics ? (a - source.mu(i)) / source.sigmaUsed(i) : a;
            }
            outScores[s] = total / paragraphs;
        }
    }
}
