/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.Writeable;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.ToXContent;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.test.AbstractSerializingTestCase;

import java.io.IOException;
import java.util.Arrays;

/**
 * The {@code sdr_vectors} search ext: its wire format, its XContent and equals/hashCode by
 * OpenSearch's serialization tests; its defaults and bad input (a 400 naming the key). (What it
 * returns per hit: SdrFetchSubPhaseTests.)
 */
public class SdrVectorsExtTests extends AbstractSerializingTestCase<SdrVectorsExt> {
    @Override
    protected SdrVectorsExt createTestInstance() {
        String field = randomBoolean() ? null : randomField();
        switch (randomIntBetween(0, 2)) {
            case 0: return new SdrVectorsExt(field);
            case 1: return new SdrVectorsExt(field, true);
            default: return new SdrVectorsExt(field, false, randomCentroids());
        }
    }

    private static String randomField() {
        return randomAlphaOfLengthBetween(1, 8) + "." + randomAlphaOfLengthBetween(1, 8);
    }

    private static float[] randomCentroids() {
        float[] out = new float[randomIntBetween(1, 12)];
        for (int i = 0; i < out.length; i++) {
            out[i] = randomFloat() * 2 - 1;
        }
        return out;
    }

    @Override
    protected SdrVectorsExt mutateInstance(SdrVectorsExt ext) {
        String field = ext.field();
        boolean mean = ext.mean();
        float[] centroids = ext.centroids();
        switch (randomIntBetween(0, 2)) {
            case 0:
                field = randomValueOtherThan(field, SdrVectorsExtTests::randomField);
                break;
            case 1:  // what a hit gets: its vectors, its mean, or the centroid rows
                if (mean || centroids != null) {
                    mean = mean == false && randomBoolean();
                    centroids = null;
                } else if (randomBoolean()) {
                    mean = true;
                } else {
                    centroids = randomCentroids();
                }
                break;
            default:
                mean = false;
                centroids = randomValueOtherThanMany(c -> Arrays.equals(c, ext.centroids()), SdrVectorsExtTests::randomCentroids);
        }
        return new SdrVectorsExt(field, mean, centroids);
    }

    @Override
    protected Writeable.Reader<SdrVectorsExt> instanceReader() {
        return SdrVectorsExt::new;
    }

    /** The ext as a search body's "ext" holds it: {"sdr_vectors": {...}}. */
    @Override
    protected SdrVectorsExt doParseInstance(XContentParser parser) throws IOException {
        assertEquals(XContentParser.Token.START_OBJECT, parser.nextToken());
        assertEquals(XContentParser.Token.FIELD_NAME, parser.nextToken());
        assertEquals(SdrVectorsExt.NAME, parser.currentName());
        assertEquals(XContentParser.Token.START_OBJECT, parser.nextToken());
        SdrVectorsExt ext = SdrVectorsExt.fromXContent(parser);
        assertEquals(XContentParser.Token.END_OBJECT, parser.nextToken());
        return ext;
    }

    private static SdrVectorsExt parse(String body) throws IOException {
        try (XContentParser p = JsonXContent.jsonXContent.createParser(NamedXContentRegistry.EMPTY,
            DeprecationHandler.THROW_UNSUPPORTED_OPERATION, body)) {
            p.nextToken();
            return SdrVectorsExt.fromXContent(p);
        }
    }

    private static String toJson(SdrVectorsExt ext) throws IOException {
        XContentBuilder x = XContentFactory.jsonBuilder().startObject();
        ext.toXContent(x, ToXContent.EMPTY_PARAMS);
        return x.endObject().toString();
    }

    public void testDefaultsAndOptions() throws IOException {
        SdrVectorsExt plain = parse("{}");
        assertEquals("sentences.vector", plain.field());
        assertEquals("sentences.paragraph", plain.paragraphField());
        assertEquals("sentences.position", plain.positionField());
        assertFalse(plain.mean());
        assertNull(plain.centroids());
        assertEquals("{\"sdr_vectors\":{\"field\":\"sentences.vector\"}}", toJson(plain));
        assertTrue(parse("{\"mean\": true}").mean());
        SdrVectorsExt other = parse("{\"field\": \"passages.embedding\"}");
        assertEquals("passages.paragraph", other.paragraphField());
        assertEquals("passages.position", other.positionField());
    }

    public void testCentroidsAreBase64Float32() throws IOException {
        String b64 = TestSources.b64(1f, 0f, 0.6f, 0.8f);  // two rows of 2 floats
        SdrVectorsExt ext = parse("{\"centroids\": \"" + b64 + "\"}");
        assertArrayEquals(new float[] { 1f, 0f, 0.6f, 0.8f }, ext.centroids(), 0f);
        assertEquals("{\"sdr_vectors\":{\"field\":\"sentences.vector\",\"centroids\":\"" + b64 + "\"}}", toJson(ext));
    }

    public void testBadInputNamesTheKey() {
        String b64 = TestSources.b64(1f, 0f, 0.6f, 0.8f);
        String[][] bad = {
            { "{\"size\": 3}", "does not support [size]" },
            { "{\"centroids\": \"" + b64 + "\", \"mean\": true}", "[mean] and [centroids] do not go together" },
            { "{\"centroids\": \"" + TestSources.b64(Float.NaN) + "\"}", "[centroids] must be finite" },
            { "{\"centroids\": \"AAA=\"}", "not a whole number of float32 values" },
            { "{\"centroids\": \"\"}", "[centroids] is empty" },
            { "{\"centroids\": \"%%\"}", "[centroids] is not valid base64" },
        };
        for (String[] b : bad) {
            ParsingException e = expectThrows(ParsingException.class, () -> parse(b[0]));
            assertTrue(b[0] + ": " + e.getMessage(), e.getMessage().contains(b[1]));
        }
    }
}
