/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.settings.ClusterSettings;
import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;

import java.util.List;
import java.util.Locale;

/**
 * The node's bounds on what one request may make the plugin allocate (README.md, "Limits"). Each is a
 * dynamic cluster setting ({@code PUT _cluster/settings}; {@code GET _cluster/settings?include_defaults=true}
 * shows them, which is how the Python store learns them); a request over one is refused with a 400 that names
 * the request field and the setting, before the allocation it bounds:
 * <ul>
 *   <li>{@code sdr.limits.max_source_sentences} (20,000, the largest document the stores accept): rows of
 *       {@code vectors} in the {@code sdr} rescorer and {@code sdr_candidates}, rows of {@code centroids} in
 *       {@code sdr_vectors};</li>
 *   <li>{@code sdr.limits.max_source_values} (10,000,000 float32 values, 40 MB): the decoded source (rows x
 *       dimension), checked when the request is parsed, before any float row is built;</li>
 *   <li>{@code sdr.limits.max_explain_pairs} (1,000,000): explained hits x source sentences, for
 *       {@code explain} and {@code explain_top};</li>
 *   <li>{@code sdr.limits.max_fetch_values} (10,000,000): float values one {@code sdr_vectors} fetch returns
 *       over its hits on a shard (one hit alone is always allowed: the index's nested-objects limit bounds it);</li>
 *   <li>{@code sdr.limits.max_candidate_hits} (10,000,000): source sentences x hits per sentence in
 *       {@code sdr_candidates}.</li>
 * </ul>
 * The values live in static fields (one plugin per node), updated by the cluster settings.
 */
final class SdrLimits {
    static final Setting<Integer> MAX_SOURCE_SENTENCES = Setting.intSetting("sdr.limits.max_source_sentences", 20_000, 1,
        Setting.Property.NodeScope, Setting.Property.Dynamic);
    static final Setting<Long> MAX_SOURCE_VALUES = Setting.longSetting("sdr.limits.max_source_values", 10_000_000L, 1,
        Setting.Property.NodeScope, Setting.Property.Dynamic);
    static final Setting<Long> MAX_EXPLAIN_PAIRS = Setting.longSetting("sdr.limits.max_explain_pairs", 1_000_000L, 1,
        Setting.Property.NodeScope, Setting.Property.Dynamic);
    static final Setting<Long> MAX_FETCH_VALUES = Setting.longSetting("sdr.limits.max_fetch_values", 10_000_000L, 1,
        Setting.Property.NodeScope, Setting.Property.Dynamic);
    static final Setting<Long> MAX_CANDIDATE_HITS = Setting.longSetting("sdr.limits.max_candidate_hits", 10_000_000L, 1,
        Setting.Property.NodeScope, Setting.Property.Dynamic);

    static List<Setting<?>> settings() {
        return List.of(MAX_SOURCE_SENTENCES, MAX_SOURCE_VALUES, MAX_EXPLAIN_PAIRS, MAX_FETCH_VALUES, MAX_CANDIDATE_HITS);
    }

    private static volatile int maxSourceSentences = MAX_SOURCE_SENTENCES.getDefault(Settings.EMPTY);
    private static volatile long maxSourceValues = MAX_SOURCE_VALUES.getDefault(Settings.EMPTY);
    private static volatile long maxExplainPairs = MAX_EXPLAIN_PAIRS.getDefault(Settings.EMPTY);
    private static volatile long maxFetchValues = MAX_FETCH_VALUES.getDefault(Settings.EMPTY);
    private static volatile long maxCandidateHits = MAX_CANDIDATE_HITS.getDefault(Settings.EMPTY);

    private SdrLimits() {}

    /** Reads the current values and follows their updates (called once the node's cluster settings exist). */
    static void follow(ClusterSettings settings) {
        maxSourceSentences = settings.get(MAX_SOURCE_SENTENCES);
        maxSourceValues = settings.get(MAX_SOURCE_VALUES);
        maxExplainPairs = settings.get(MAX_EXPLAIN_PAIRS);
        maxFetchValues = settings.get(MAX_FETCH_VALUES);
        maxCandidateHits = settings.get(MAX_CANDIDATE_HITS);
        settings.addSettingsUpdateConsumer(MAX_SOURCE_SENTENCES, v -> maxSourceSentences = v);
        settings.addSettingsUpdateConsumer(MAX_SOURCE_VALUES, v -> maxSourceValues = v);
        settings.addSettingsUpdateConsumer(MAX_EXPLAIN_PAIRS, v -> maxExplainPairs = v);
        settings.addSettingsUpdateConsumer(MAX_FETCH_VALUES, v -> maxFetchValues = v);
        settings.addSettingsUpdateConsumer(MAX_CANDIDATE_HITS, v -> maxCandidateHits = v);
    }

    /** For tests: sets every limit (null keeps a value as it is); {@link #reset} restores the defaults. */
    static void set(Integer sentences, Long values, Long explainPairs, Long fetchValues, Long candidateHits) {
        if (sentences != null) {
            maxSourceSentences = sentences;
        }
        if (values != null) {
            maxSourceValues = values;
        }
        if (explainPairs != null) {
            maxExplainPairs = explainPairs;
        }
        if (fetchValues != null) {
            maxFetchValues = fetchValues;
        }
        if (candidateHits != null) {
            maxCandidateHits = candidateHits;
        }
    }

    static void reset() {
        maxSourceSentences = MAX_SOURCE_SENTENCES.getDefault(Settings.EMPTY);
        maxSourceValues = MAX_SOURCE_VALUES.getDefault(Settings.EMPTY);
        maxExplainPairs = MAX_EXPLAIN_PAIRS.getDefault(Settings.EMPTY);
        maxFetchValues = MAX_FETCH_VALUES.getDefault(Settings.EMPTY);
        maxCandidateHits = MAX_CANDIDATE_HITS.getDefault(Settings.EMPTY);
    }

    static int maxSourceSentences() {
        return maxSourceSentences;
    }

    static long maxSourceValues() {
        return maxSourceValues;
    }

    static long maxExplainPairs() {
        return maxExplainPairs;
    }

    static long maxFetchValues() {
        return maxFetchValues;
    }

    static long maxCandidateHits() {
        return maxCandidateHits;
    }

    // -- the checks (IllegalArgumentException: a 400; callers add their clause's name) --------------------------

    /** {@code field} holds {@code sentences} rows: refused over {@code sdr.limits.max_source_sentences}. */
    static void checkSourceSentences(String field, long sentences) {
        long limit = maxSourceSentences;
        if (sentences > limit) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "[%s] holds %d sentences, more than the %d one "
                + "request may send (%s); split the source", field, sentences, limit, MAX_SOURCE_SENTENCES.getKey()));
        }
    }

    /** {@code field} holds {@code values} float values: refused over {@code sdr.limits.max_source_values}. */
    static void checkSourceValues(String field, long values) {
        long limit = maxSourceValues;
        if (values > limit) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "[%s] holds %d float values, more than the %d one "
                + "request may send (%s)", field, values, limit, MAX_SOURCE_VALUES.getKey()));
        }
    }

    /** {@code hits} breakdowns of {@code sentences} source sentences each: refused over {@code sdr.limits.max_explain_pairs}. */
    static void checkExplainPairs(String field, long hits, int sentences) {
        long limit = maxExplainPairs;
        long pairs = hits * sentences;
        if (pairs > limit) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "[%s] asks for the breakdowns of %d hits of %d source "
                + "sentences each (%d sentence pairs), more than the %d one request may keep (%s): explain fewer hits",
                field, hits, sentences, pairs, limit, MAX_EXPLAIN_PAIRS.getKey()));
        }
    }

    /** {@code values} float values over {@code hits} hits of one fetch: refused over {@code sdr.limits.max_fetch_values}. */
    static void checkFetchValues(String what, long values, long hits) {
        long limit = maxFetchValues;
        if (values > limit) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "[%s] %s would return %d float values for %d hits, "
                + "more than the %d one fetch may return (%s): fetch fewer hits per request", SdrVectorsExt.NAME, what, values,
                hits, limit, MAX_FETCH_VALUES.getKey()));
        }
    }

    /** {@code sentences} source sentences x {@code perSentence} hits each: refused over {@code sdr.limits.max_candidate_hits}. */
    static void checkCandidateHits(long sentences, long perSentence, String which) {
        long limit = maxCandidateHits;
        long hits = sentences * perSentence;
        if (hits > limit) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "%d source sentences x %d hits per sentence (%s) = %d "
                + "candidate hits, more than the %d one request may collect (%s): lower [k] or send fewer sentences",
                sentences, perSentence, which, hits, limit, MAX_CANDIDATE_HITS.getKey()));
        }
    }
}
