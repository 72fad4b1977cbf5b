/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.ParseField;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.Writeable;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.ToXContent;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.search.rescore.RescorerBuilder;
import org.opensearch.test.AbstractSerializingTestCase;

import java.io.IOException;
import java.util.List;
import java.util.Locale;

/**
 * The {@code sdr} rescore clause: its wire format, its XContent (the whole rescore element, through
 * OpenSearch's own {@code RescorerBuilder.parseFromXContent}) and equals/hashCode by OpenSearch's
 * serialization tests; parsing and validation (every bad input is a 400 with a message naming the field).
 */
public class SdrRescorerBuilderTests extends AbstractSerializingTestCase<SdrRescorerBuilder> {
    private static final NamedXContentRegistry REGISTRY = new NamedXContentRegistry(List.of(
        new NamedXContentRegistry.Entry(RescorerBuilder.class, new ParseField(SdrRescorerBuilder.NAME),
            (p, c) -> SdrRescorerBuilder.fromXContent(p))));

    @Override
    protected NamedXContentRegistry xContentRegistry() {
        return REGISTRY;
    }

    @Override
    protected SdrRescorerBuilder createTestInstance() {
        return build(TestSources.random(random(), true, true), randomBoolean() ? null : randomField(),
            randomBoolean() ? null : randomField(), randomBoolean() ? null : randomField(), randomBoolean(),
            randomBoolean() ? 0 : randomIntBetween(1, 1000), randomBoolean() ? null : randomIntBetween(1, 10_000),
            randomBoolean() ? new String[0] : randomSourceFields());
    }

    private static String[] randomSourceFields() {
        return randomArray(1, 4, String[]::new, () -> randomAlphaOfLengthBetween(1, 8));
    }

    private static String randomField() {
        return randomAlphaOfLengthBetween(1, 8) + "." + randomAlphaOfLengthBetween(1, 8);
    }

    private static SdrRescorerBuilder build(SdrSource source, String field, String paragraphField, String positionField,
                                            boolean explain, int explainTop, Integer windowSize, String[] explainSource) {
        // explain_source goes with explain or explain_top
        String[] fields = explain || explainTop > 0 ? explainSource : new String[0];
        SdrRescorerBuilder built = new SdrRescorerBuilder(source, field, paragraphField, positionField, explain, explainTop, fields);
        return windowSize == null ? built : built.windowSize(windowSize);
    }

    @Override
    protected SdrRescorerBuilder mutateInstance(SdrRescorerBuilder b) {
        SdrSource source = b.source();
        String field = b.field();
        String paragraphField = b.paragraphField();
        String positionField = b.positionField();
        boolean explain = b.explain();
        int explainTop = b.explainTop();
        Integer windowSize = b.windowSize();
        String[] explainSource = b.explainSource();
        switch (randomIntBetween(0, 7)) {
            case 0: source = TestSources.mutate(random(), source, true, true); break;
            case 1: field = randomValueOtherThan(field, SdrRescorerBuilderTests::randomField); break;
            case 2: paragraphField = randomValueOtherThan(paragraphField, SdrRescorerBuilderTests::randomField); break;
            case 3: positionField = randomValueOtherThan(positionField, SdrRescorerBuilderTests::randomField); break;
            case 4: explain = explain == false; break;
            case 5: explainTop = randomValueOtherThan(explainTop, () -> randomIntBetween(0, 1000)); break;
            case 6:
                explainTop = explain || explainTop > 0 ? explainTop : 1;
                String[] before = explainSource;
                explainSource = randomValueOtherThanMany(f -> java.util.Arrays.equals(f, before), SdrRescorerBuilderTests::randomSourceFields);
                break;
            default: windowSize = randomValueOtherThan(windowSize, () -> randomBoolean() ? null : randomIntBetween(1, 10_000));
        }
        return build(source, field, paragraphField, positionField, explain, explainTop, windowSize, explainSource);
    }

    @Override
    protected Writeable.Reader<SdrRescorerBuilder> instanceReader() {
        return SdrRescorerBuilder::new;
    }

    /** A whole rescore element: {"window_size": .., "sdr": {..}}, through OpenSearch's own parser. */
    @Override
    protected SdrRescorerBuilder doParseInstance(XContentParser parser) throws IOException {
        assertEquals(XContentParser.Token.START_OBJECT, parser.nextToken());
        RescorerBuilder<?> parsed = RescorerBuilder.parseFromXContent(parser);
        assertTrue(parsed instanceof SdrRescorerBuilder);
        return (SdrRescorerBuilder) parsed;
    }

    private static XContentParser parser(String json) throws IOException {
        return JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, json);
    }

    /** The body of "sdr": {...}. */
    private static SdrRescorerBuilder parse(String body) throws IOException {
        try (XContentParser p = parser(body)) {
            p.nextToken();
            return SdrRescorerBuilder.fromXContent(p);
        }
    }

    /** A whole rescore element: {"window_size": .., "sdr": {..}}, through OpenSearch's own parser. */
    private static RescorerBuilder<?> parseRescore(String json) throws IOException {
        try (XContentParser p = parser(json)) {
            p.nextToken();
            return RescorerBuilder.parseFromXContent(p);
        }
    }

    private static String rows(float[][] rows) {
        StringBuilder sb = new StringBuilder("[");
        for (int k = 0; k < rows.length; k++) {
            sb.append(k == 0 ? "[" : ",[");
            for (int x = 0; x < rows[k].length; x++) {
                sb.append(x == 0 ? "" : ",").append(Float.toString(rows[k][x]));
            }
            sb.append(']');
        }
        return sb.append(']').toString();
    }

    private static String body(String vectors, String rest) {
        return "{\"vectors\": " + vectors + (rest.isEmpty() ? "" : ", " + rest) + "}";
    }

    private static final String STATS_2 = "\"paragraph_sizes\": [1, 2], \"mu\": [0.1, 0.2], \"sigma\": [0.5, 0.0]";

    private void assertBadRequest(String body, String expected) {
        ParsingException e = expectThrows(ParsingException.class, () -> parse(body));
        assertTrue("[" + e.getMessage() + "] should contain [" + expected + "]", e.getMessage().contains(expected));
        assertEquals(400, e.status().getStatus());
    }

    public void testBase64AndArraysGiveTheSameSource() throws IOException {
        float[][] v = { { 1, 0, 0 }, { 0, 1, 0 }, { 0.6f, 0.8f, 0 } };
        SdrRescorerBuilder fromArrays = parse(body(rows(v), STATS_2));
        SdrRescorerBuilder fromBase64 = parse(body("\"" + TestSources.b64(1, 0, 0, 0, 1, 0, 0.6f, 0.8f, 0) + "\"", STATS_2));
        assertEquals(fromArrays, fromBase64);
        assertEquals(fromArrays.hashCode(), fromBase64.hashCode());
        SdrSource source = fromBase64.source();
        assertEquals(3, source.dim());
        assertEquals(3, source.sentences());
        assertEquals(2, source.paragraphs());
        assertEquals(1, source.paragraphStart(1));
        assertEquals(1.0, source.sigmaUsed(1), 0);  // sigma 0 < 1e-6 counts as 1
        assertEquals(0.5, source.sigmaUsed(0), 0);
        assertEquals("sentences.vector", fromBase64.field());
        assertEquals("sentences.paragraph", fromBase64.paragraphField());
        assertEquals("sentences.position", fromBase64.positionField());
        assertFalse(fromBase64.explain());
        assertEquals(0, fromBase64.explainTop());
    }

    public void testWholeRescoreElementAndOptions() throws IOException {
        String json = "{\"window_size\": 50, \"sdr\": " + body("\"" + TestSources.b64(1, 0, 0, 1, 1, 0) + "\"",
            STATS_2 + ", \"explain\": true, \"explain_top\": 7, \"field\": \"s.v\", \"parts\": [1, 1], "
                + "\"explain_source\": [\"title\", \"paragraphs\"]") + "}";
        RescorerBuilder<?> rescore = parseRescore(json);
        assertTrue(rescore instanceof SdrRescorerBuilder);
        SdrRescorerBuilder sdr = (SdrRescorerBuilder) rescore;
        assertEquals(Integer.valueOf(50), sdr.windowSize());
        assertTrue(sdr.explain());
        assertEquals(7, sdr.explainTop());
        assertArrayEquals(new String[] { "title", "paragraphs" }, sdr.explainSource());
        assertEquals("s.v", sdr.field());
        assertEquals("s.paragraph", sdr.paragraphField());
        assertEquals("s.position", sdr.positionField());
        assertEquals(2, sdr.source().dim());
        XContentBuilder x = XContentFactory.jsonBuilder();
        sdr.toXContent(x, ToXContent.EMPTY_PARAMS);
        String written = x.toString();
        assertTrue(written, written.startsWith("{\"window_size\":50,\"sdr\":{\"vectors\":\""));
    }

    public void testBadInputIsA400NamingTheField() {
        String v3 = "\"" + TestSources.b64(1, 0, 0, 1, 1, 0) + "\"";  // 3 sentences of 2, or 2 of 3, or 6 of 1
        assertBadRequest(body(v3, "\"paragraph_sizes\": [2, 2], \"mu\": [0, 0], \"sigma\": [1, 1]"),
            "[vectors] holds 6 float32 values, not a whole number of rows for 4 sentences");
        assertBadRequest(body("[[1,0],[0,1],[1,1]]", "\"paragraph_sizes\": [2, 2], \"mu\": [0, 0], \"sigma\": [1, 1]"),
            "[paragraph_sizes] add up to 4 sentences but [vectors] holds 3");
        assertBadRequest(body("[[1,0],[0,1,0]]", STATS_2), "[vectors] sentence 1 has 3 values, sentence 0 has 2");
        assertBadRequest(body("\"" + TestSources.b64(1, Float.NaN, 0, 1, 1, 0) + "\"", STATS_2), "[vectors] sentence 0 holds NaN at dimension 1");
        assertBadRequest(body("\"" + TestSources.b64(1, 0, 0, 1, Float.POSITIVE_INFINITY, 0) + "\"", STATS_2), "holds Infinity");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [1e400, 0], \"sigma\": [1, 1]"),
            "[mu] value 0 is Infinity: statistics must be finite");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [0, 0], \"sigma\": [1, -1e400]"), "[sigma] value 1 is -Infinity");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [0, 0], \"sigma\": [1, -0.5]"), "[sigma] value 1 is negative");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"sigma\": [1, 1]"), "[mu] is required");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [0, 0]"), "[sigma] is required");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [0], \"sigma\": [1, 1]"), "[mu] has 1 values for 2 source paragraphs");
        assertBadRequest(body(v3, "\"mu\": [0], \"sigma\": [1]"), "[paragraph_sizes] is required");
        assertBadRequest("{\"paragraph_sizes\": [1], \"mu\": [0], \"sigma\": [1]}", "[vectors] is required");
        assertBadRequest(body("[]", "\"paragraph_sizes\": [], \"mu\": [], \"sigma\": []"), "empty source");
        assertBadRequest(body("\"\"", "\"paragraph_sizes\": [], \"mu\": [], \"sigma\": []"), "empty source");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [], \"mu\": [], \"sigma\": []"), "empty source: [paragraph_sizes] names no sentence");
        assertBadRequest(body("[[1,0],[0,1]]", "\"paragraph_sizes\": [2, 0], \"mu\": [0, 0], \"sigma\": [1, 1]"),
            "[paragraph_sizes] paragraph 1 has 0 sentences");
        assertBadRequest(body("\"not base64!\"", STATS_2), "[vectors] is not valid base64");
        assertBadRequest(body("\"AAAAAAA=\"", STATS_2), "[vectors] holds 5 bytes, not a whole number of float32 values");
        assertBadRequest(body(v3, STATS_2 + ", \"parts\": [1, 2]"), "[parts] add up to 3 paragraphs but the source has 2");
        assertBadRequest(body(v3, STATS_2 + ", \"explain\": \"yes\""), "[explain] must be true or false");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": -1"), "[explain_top] must be an integer of 0 or more, got -1");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 2.5"), "[explain_top] must be an integer of 0 or more, got 2.5");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": \"3\""), "[explain_top] must be an integer of 0 or more, got VALUE_STRING");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 1e12"), "[explain_top] must be an integer of 0 or more");
        assertBadRequest(body(v3, STATS_2 + ", \"k\": 3"), "[sdr] does not support [k]");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_source\": [\"title\"]"),
            "[explain_source] goes with [explain] or [explain_top]: it adds the source of the hits they explain");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 3, \"explain_source\": \"title\""),
            "[explain_source] must be an array of field names, got VALUE_STRING");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 3, \"explain_source\": [\"title\", 3]"),
            "[explain_source] must be an array of field names, got VALUE_NUMBER in it");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 3, \"explain_source\": [\"\"]"),
            "[explain_source] must name fields: an empty name");
        assertBadRequest(body(v3, STATS_2 + ", \"explain_top\": 3, \"explain_source\": ["
            + String.join(", ", java.util.Collections.nCopies(SdrRescorerBuilder.MAX_SOURCE_FIELDS + 1, "\"f\"")) + "]"),
            "[explain_source] names more than 64 fields");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1, 2], \"mu\": [0, \"x\"], \"sigma\": [1, 1]"), "[mu] value 1 must be a number");
        assertBadRequest(body(v3, "\"paragraph_sizes\": [1.5, 1.5], \"mu\": [0, 0], \"sigma\": [1, 1]"), "must be an integer");
        assertBadRequest(body("3", STATS_2), "[vectors] must be a base64 string");
        assertBadRequest(body(v3, STATS_2 + ", \"field\": \"vector\""), "[field] must be a field of a nested object");
    }

    public void testMessagesAreNotLocaleDependent() throws IOException {
        Locale saved = Locale.getDefault();
        try {
            Locale.setDefault(Locale.GERMANY);
            assertEquals(2, parse(body("[[0.5,0.25]]", "\"paragraph_sizes\": [1], \"mu\": [0.5], \"sigma\": [0.25]")).source().dim());
        } finally {
            Locale.setDefault(saved);
        }
    }
}
