/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.tests.util.LuceneTestCase;
import org.opensearch.common.io.stream.BytesStreamOutput;
import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.ParseField;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.NamedWriteableAwareStreamInput;
import org.opensearch.core.common.io.stream.NamedWriteableRegistry;
import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.ToXContent;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.index.query.TermQueryBuilder;

import java.io.IOException;
import java.util.List;

/** Parsing, validation (a 400 naming the field) and the wire format of the sdr_candidates query and the sdr_vectors ext. */
public class SdrCandidatesQueryBuilderTests extends LuceneTestCase {
    private static final NamedXContentRegistry REGISTRY = new NamedXContentRegistry(List.of(
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(TermQueryBuilder.NAME), TermQueryBuilder::fromXContent),
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(SdrCandidatesQueryBuilder.NAME),
            SdrCandidatesQueryBuilder::fromXContent)));
    private static final NamedWriteableRegistry WRITEABLES = new NamedWriteableRegistry(List.of(
        new NamedWriteableRegistry.Entry(QueryBuilder.class, TermQueryBuilder.NAME, TermQueryBuilder::new)));

    private static SdrCandidatesQueryBuilder parse(String body) throws IOException {
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, body)) {
            p.nextToken();
            return SdrCandidatesQueryBuilder.fromXContent(p);
        }
    }

    private static final String VECTORS = "\"vectors\": \"" + SdrRescorerBuilderTests.b64(1, 0, 0, 1, 0.6f, 0.8f) + "\"";

    public void testDefaultsAndRoundTrips() throws IOException {
        SdrCandidatesQueryBuilder plain = parse("{" + VECTORS + ", \"paragraph_sizes\": [2, 1]}");
        String json = toJson(plain);
        assertTrue(json, json.contains("\"k\":30") && json.contains("\"ef_search\":100") && json.contains("\"weighted-sum\""));
        assertFalse(json, json.contains("\"mu\""));
        SdrCandidatesQueryBuilder full = parse("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0.1, 0.2], "
            + "\"sigma\": [0.5, 1e-9], \"k\": 7, \"ef_search\": 50, \"aggregation\": \"sdr-bound\", "
            + "\"filter\": {\"term\": {\"metadata.court\": \"x\"}}, \"exclude\": [\"a\", \"b\"], \"_name\": \"c\", \"search\": \"sentences\", \"oversample\": 3}");
        assertEquals(full, parse(toJson(full).replaceFirst("^\\{\"sdr_candidates\":", "").replaceFirst("}$", "")));
        BytesStreamOutput out = new BytesStreamOutput();
        full.writeTo(out);
        try (StreamInput in = new NamedWriteableAwareStreamInput(out.bytes().streamInput(), WRITEABLES)) {
            assertEquals(full, new SdrCandidatesQueryBuilder(in));
        }
        assertEquals(3, full.source().sentences());
        assertTrue(full.filter() instanceof TermQueryBuilder);
    }

    private static String toJson(SdrCandidatesQueryBuilder builder) throws IOException {
        XContentBuilder x = XContentFactory.jsonBuilder();
        x.startObject();
        builder.doXContentForTest(x);
        x.endObject();
        return x.toString();
    }

    private void assertBad(String body, String expected) {
        ParsingException e = expectThrows(ParsingException.class, () -> parse(body));
        assertTrue(e.getMessage(), e.getMessage().contains(expected));
        assertTrue(e.getMessage(), e.getMessage().startsWith("[sdr"));
    }

    public void testBadInputNamesTheField() {
        assertBad("{\"paragraph_sizes\": [1]}", "[vectors] is required");
        assertBad("{" + VECTORS + "}", "[paragraph_sizes] is required");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0, 0]}", "[mu] and [sigma] go together");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"k\": 0}", "[k] must be between 1 and 10000");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"k\": 1.5}", "[k] must be an integer");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"aggregation\": \"max\"}", "[aggregation] must be one of");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 2]}", "not a whole number of rows");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"nope\": 1}", "does not support [nope]");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"search\": \"paragraphs\"}", "[search] must be documents or sentences");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"oversample\": 0}", "[oversample] must be at least 1");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"filter\": 3}", "[filter] must be a query object");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0, 0], \"sigma\": [1, -1]}", "[sigma] value 1 is negative");
    }

    public void testVectorsExtParsesAndRoundTrips() throws IOException {
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, "{}")) {
            p.nextToken();
            SdrVectorsExt ext = SdrVectorsExt.fromXContent(p);
            assertEquals("sentences.vector", ext.field());
            assertEquals("sentences.paragraph", ext.paragraphField());
            BytesStreamOutput out = new BytesStreamOutput();
            ext.writeTo(out);
            assertEquals(ext, new SdrVectorsExt(out.bytes().streamInput()));
            XContentBuilder x = XContentFactory.jsonBuilder().startObject();
            ext.toXContent(x, ToXContent.EMPTY_PARAMS);
            assertEquals("{\"sdr_vectors\":{\"field\":\"sentences.vector\"}}", x.endObject().toString());
        }
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION,
            "{\"mean\": true}")) {
            p.nextToken();
            SdrVectorsExt ext = SdrVectorsExt.fromXContent(p);
            assertTrue(ext.mean());
            BytesStreamOutput out = new BytesStreamOutput();
            ext.writeTo(out);
            assertEquals(ext, new SdrVectorsExt(out.bytes().streamInput()));
        }
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION,
            "{\"size\": 3}")) {
            p.nextToken();
            ParsingException e = expectThrows(ParsingException.class, () -> SdrVectorsExt.fromXContent(p));
            assertTrue(e.getMessage(), e.getMessage().contains("does not support [size]"));
        }
    }

    public void testVectorsExtCentroidsParseRoundTripAndRefuseBadInput() throws IOException {
        // two rows of 2 floats, little-endian float32: (1, 0), (0.6, 0.8)
        String b64 = java.util.Base64.getEncoder().encodeToString(java.nio.ByteBuffer.allocate(16)
            .order(java.nio.ByteOrder.LITTLE_ENDIAN).putFloat(1f).putFloat(0f).putFloat(0.6f).putFloat(0.8f).array());
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION,
            "{\"centroids\": \"" + b64 + "\"}")) {
            p.nextToken();
            SdrVectorsExt ext = SdrVectorsExt.fromXContent(p);
            assertArrayEquals(new float[] { 1f, 0f, 0.6f, 0.8f }, ext.centroids(), 0f);
            BytesStreamOutput out = new BytesStreamOutput();
            ext.writeTo(out);
            assertEquals(ext, new SdrVectorsExt(out.bytes().streamInput()));
            XContentBuilder x = XContentFactory.jsonBuilder().startObject();
            ext.toXContent(x, ToXContent.EMPTY_PARAMS);
            assertEquals("{\"sdr_vectors\":{\"field\":\"sentences.vector\",\"centroids\":\"" + b64 + "\"}}", x.endObject().toString());
        }
        String nan = java.util.Base64.getEncoder().encodeToString(java.nio.ByteBuffer.allocate(4)
            .order(java.nio.ByteOrder.LITTLE_ENDIAN).putFloat(Float.NaN).array());
        String[][] bad = {
            { "{\"centroids\": \"" + b64 + "\", \"mean\": true}", "[mean] and [centroids] do not go together" },
            { "{\"centroids\": \"" + nan + "\"}", "[centroids] must be finite" },
            { "{\"centroids\": \"AAA=\"}", "not a whole number of float32 values" },
            { "{\"centroids\": \"\"}", "[centroids] is empty" },
            { "{\"centroids\": \"%%\"}", "[centroids] is not valid base64" },
        };
        for (String[] b : bad) {
            try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, b[0])) {
                p.nextToken();
                ParsingException e = expectThrows(ParsingException.class, () -> SdrVectorsExt.fromXContent(p));
                assertTrue(b[0] + ": " + e.getMessage(), e.getMessage().contains(b[1]));
            }
        }
    }
}
