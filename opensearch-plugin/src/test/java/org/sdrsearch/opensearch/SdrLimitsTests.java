/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.tests.util.LuceneTestCase;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.ParseField;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.breaker.CircuitBreakingException;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.index.query.TermQueryBuilder;

import java.io.IOException;
import java.util.Arrays;
import java.util.List;

/**
 * The node's limits where a request is parsed ({@link SdrLimits}, {@link SourceParser}): each over-limit request is
 * a 400 naming the field and the setting, refused before the rows are built; and the bad input of issue 41 (case 6)
 * a 400 naming the field. Also what the parse charges to the {@code sdr_parse} breaker: a node short of memory
 * refuses with a {@link CircuitBreakingException} (429), and every charge is released when the parse ends.
 */
public class SdrLimitsTests extends LuceneTestCase {
    private static final NamedXContentRegistry REGISTRY = new NamedXContentRegistry(List.of(
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(TermQueryBuilder.NAME), TermQueryBuilder::fromXContent),
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(SdrCandidatesQueryBuilder.NAME),
            SdrCandidatesQueryBuilder::fromXContent)));

    @Override
    public void tearDown() throws Exception {
        SdrLimits.reset();
        ParseBreaker.set(null);
        super.tearDown();
    }

    private static XContentParser parser(String json) throws IOException {
        XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, json);
        p.nextToken();
        return p;
    }

    private static SdrRescorerBuilder rescorer(String json) throws IOException {
        try (XContentParser p = parser(json)) {
            return SdrRescorerBuilder.fromXContent(p);
        }
    }

    private static SdrCandidatesQueryBuilder candidates(String json) throws IOException {
        try (XContentParser p = parser(json)) {
            return SdrCandidatesQueryBuilder.fromXContent(p);
        }
    }

    private static SdrVectorsExt vectorsExt(String json) throws IOException {
        try (XContentParser p = parser(json)) {
            return SdrVectorsExt.fromXContent(p);
        }
    }

    /** n rows of dim values (i / 100), as base64 float32. */
    private static String b64Rows(int n, int dim) {
        float[] v = new float[n * dim];
        for (int i = 0; i < v.length; i++) {
            v[i] = (i % 97) / 100f;
        }
        return TestSources.b64(v);
    }

    private static String arrayRows(int n, int dim) {
        StringBuilder sb = new StringBuilder("[");
        for (int k = 0; k < n; k++) {
            sb.append(k == 0 ? "[" : ",[");
            for (int x = 0; x < dim; x++) {
                sb.append(x == 0 ? "" : ",").append("0.5");
            }
            sb.append(']');
        }
        return sb.append(']').toString();
    }

    private static String ones(int n) {
        int[] sizes = new int[n];
        Arrays.fill(sizes, 1);
        return Arrays.toString(sizes);
    }

    private static String zeros(int n, double v) {
        double[] a = new double[n];
        Arrays.fill(a, v);
        return Arrays.toString(a);
    }

    /** A rescore clause of n one-sentence paragraphs of dim values, vectors first (as the store sends them). */
    private static String sdr(String vectors, int n, String rest) {
        return "{\"vectors\": " + vectors + ", \"paragraph_sizes\": " + ones(n) + ", \"mu\": " + zeros(n, 0) + ", \"sigma\": "
            + zeros(n, 1) + (rest.isEmpty() ? "" : ", " + rest) + "}";
    }

    private static void assertBad(ThrowingRunnable parse, String... expected) {
        ParsingException e = expectThrows(ParsingException.class, parse);
        assertEquals(400, e.status().getStatus());
        for (String part : expected) {
            assertTrue("[" + e.getMessage() + "] should contain [" + part + "]", e.getMessage().contains(part));
        }
    }

    public void testSourceSentencesOverTheLimitAre400sNamingTheSetting() throws IOException {
        SdrLimits.set(10, null, null, null, null);
        assertEquals(10, rescorer(sdr("\"" + b64Rows(10, 3) + "\"", 10, "")).source().sentences());
        // base64: refused once paragraph_sizes (after vectors here) says 11 sentences, before the rows are built
        assertBad(() -> rescorer("{\"vectors\": \"" + b64Rows(11, 3) + "\", \"paragraph_sizes\": [5, 6], \"mu\": [0, 0], "
            + "\"sigma\": [1, 1]}"), "[sdr] [vectors] holds 11 sentences", "sdr.limits.max_source_sentences");
        // arrays: refused at row 11, without reading the rest; paragraph_sizes longer than the limit too
        assertBad(() -> rescorer(sdr(arrayRows(500, 3), 500, "")), "[sdr] [vectors] holds 11 sentences", "max_source_sentences");
        assertBad(() -> rescorer("{\"paragraph_sizes\": " + ones(50) + "}"), "[sdr] [paragraph_sizes] holds 11 sentences");
        assertBad(() -> candidates("{\"vectors\": \"" + b64Rows(11, 3) + "\", \"paragraph_sizes\": [11]}"),
            "[sdr_candidates] [vectors] holds 11 sentences", "sdr.limits.max_source_sentences");
    }

    public void testSourceValuesOverTheLimitAre400sBeforeAnyRowIsBuilt() throws IOException {
        SdrLimits.set(null, 60L, null, null, null);
        assertEquals(20, rescorer(sdr("\"" + b64Rows(20, 3) + "\"", 20, "")).source().sentences());
        assertBad(() -> rescorer(sdr("\"" + b64Rows(21, 3) + "\"", 21, "")), "[sdr] [vectors] holds 63 float values",
            "more than the 60 one request may send (sdr.limits.max_source_values)");
        assertBad(() -> rescorer(sdr(arrayRows(1, 61), 1, "")), "[vectors] holds 61 float values", "max_source_values");
        assertBad(() -> rescorer(sdr(arrayRows(30, 3), 30, "")), "[vectors] holds 61 float values", "max_source_values");
        assertBad(() -> candidates("{\"vectors\": \"" + b64Rows(16, 4) + "\", \"paragraph_sizes\": [16]}"),
            "[sdr_candidates] [vectors] holds 64 float values", "max_source_values");
        assertBad(() -> vectorsExt("{\"centroids\": \"" + b64Rows(8, 8) + "\"}"), "[sdr_vectors] [centroids] holds 64 float values",
            "max_source_values");
    }

    public void testCandidateHitsOverTheLimitAre400sAndDocumentsModeIgnoresOversample() throws IOException {
        String three = "\"vectors\": \"" + b64Rows(3, 2) + "\", \"paragraph_sizes\": [2, 1]";
        // documents mode does not use oversample: k 10000 with the default oversample (4) is a request like any other
        assertEquals(3, candidates("{" + three + ", \"k\": 10000, \"ef_search\": 10000}").source().sentences());
        assertBad(() -> candidates("{" + three + ", \"k\": 5000, \"search\": \"sentences\"}"),
            "[oversample] x [k] must be at most 10000 in [search] sentences, got 4 x 5000");
    }

    public void testCandidateHitsCountKOrOversampleAndEfSearch() throws IOException {
        String three = "\"vectors\": \"" + b64Rows(3, 2) + "\", \"paragraph_sizes\": [2, 1]";
        SdrLimits.set(null, null, null, null, 300L);
        assertEquals(3, candidates("{" + three + ", \"k\": 99}").source().sentences());  // 3 x max(99, 100) = 300
        assertBad(() -> candidates("{" + three + ", \"k\": 101, \"ef_search\": 101}"),
            "3 source sentences x 101 hits per sentence (max(k, ef_search)) = 303 candidate hits",
            "more than the 300 one request may collect (sdr.limits.max_candidate_hits)");
        assertBad(() -> candidates("{" + three + ", \"k\": 30, \"search\": \"sentences\", \"oversample\": 4}"),
            "3 source sentences x 120 hits per sentence (max(k x oversample, ef_search)) = 360");
    }

    public void testCase6BadInputIs400NamingTheField() throws IOException {
        String three = "\"vectors\": \"" + b64Rows(3, 2) + "\", \"paragraph_sizes\": [2, 1]";
        assertBad(() -> candidates("{" + three + ", \"_name\": {\"a\": 1}}"), "[sdr_candidates] [_name] must be a string, got START_OBJECT");
        assertBad(() -> candidates("{" + three + ", \"_name\": [\"a\"]}"), "[sdr_candidates] [_name] must be a string, got START_ARRAY");
        assertBad(() -> candidates("{" + three + ", \"boost\": \"abc\"}"), "[sdr_candidates] [boost] must be a number, got [abc]");
        assertBad(() -> candidates("{" + three + ", \"boost\": -1}"), "[boost] must be a finite number of 0 or more");
        assertBad(() -> candidates("{" + three + ", \"boost\": {}}"), "[boost] must be a number, got START_OBJECT");
        assertEquals(2.5f, candidates("{" + three + ", \"boost\": \"2.5\", \"_name\": \"n\"}").boost(), 0f);
        ParsingException e = expectThrows(ParsingException.class, () -> rescorer(sdr("\"" + b64Rows(2, 2) + "\"", 2, "\"k\": 3")));
        assertTrue(e.getMessage(), e.getMessage().startsWith("[sdr] does not support [k]: its keys are vectors, paragraph_sizes"));
        assertFalse(e.getMessage(), e.getMessage().contains("[sdr] [sdr]"));
        assertBad(() -> vectorsExt("{\"mean\": \"yes\"}"), "[sdr_vectors] [mean] must be true or false, got VALUE_STRING");
        assertBad(() -> vectorsExt("{\"field\": 3}"), "[sdr_vectors] [field] must be a string, got VALUE_NUMBER");
        assertBad(() -> vectorsExt("{\"centroids\": 3}"), "[sdr_vectors] [centroids] must be a base64 string");
        assertBad(() -> rescorer(sdr("\"%%%%\"", 1, "")), "[sdr] [vectors] is not valid base64");
    }

    public void testTheParseIsChargedToTheParseBreakerAndReleased() throws IOException {
        LimitedBreaker roomy = new LimitedBreaker(1L << 30);
        ParseBreaker.set(roomy);
        rescorer(sdr("\"" + b64Rows(100, 64) + "\"", 100, ""));
        assertTrue("the decoded bytes and the rows were charged: " + roomy.peak(), roomy.peak() >= 2L * 100 * 64 * 4);
        assertEquals("released when the parse ends", 0, roomy.getUsed());
        candidates("{\"vectors\": \"" + b64Rows(100, 64) + "\", \"paragraph_sizes\": " + ones(100) + "}");
        vectorsExt("{\"centroids\": \"" + b64Rows(100, 64) + "\"}");
        assertEquals(0, roomy.getUsed());

        LimitedBreaker tight = new LimitedBreaker(100 * 64 * 4 + 1000);  // the bytes fit; the rows on top of them do not
        ParseBreaker.set(tight);
        CircuitBreakingException e = expectThrows(CircuitBreakingException.class,
            () -> rescorer(sdr("\"" + b64Rows(100, 64) + "\"", 100, "")));
        assertEquals(429, e.status().getStatus());
        assertEquals("a refused parse releases what it had charged", 0, tight.getUsed());
        assertEquals(1, tight.getTrippedCount());
        // a source over the limit is a 400 before its rows are built, and what its bytes took is released
        SdrLimits.set(null, 100L, null, null, null);
        assertBad(() -> rescorer(sdr("\"" + b64Rows(100, 64) + "\"", 100, "")), "max_source_values");
        assertEquals(0, tight.getUsed());
    }
}
