/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.search.SearchExtBuilder;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Base64;
import java.util.Objects;

/**
 * {@code "ext": {"sdr_vectors": {}}} on a search: every returned hit gets the field
 * {@code _sdr_vectors} with its sentence vectors as the index holds them (the nested
 * {@code knn_vector} data, no {@code _source}): {@code {"vectors": base64 little-endian float32,
 * row-major, "dim": d, "paragraph_sizes": [...]}}, sentences ordered by (paragraph, position).
 * With {@code "mean": true}, instead of the vectors, {@code "mean"}: the normalised mean sentence
 * vector (base64 float32), what hybrid ranking needs of a candidate besides its SDR score.
 * With {@code "centroids": "<base64 float32>"} (a source's paragraph centroids, n rows of the field's
 * dimension), instead of the vectors, {@code "centroid_rows"}: for each source centroid i the best
 * cosine max_j cos(centroid_i, c_j) over the hit's paragraph centroids c_j (normalised means of its
 * paragraphs' sentences), base64 float32, n values: the engine's centroid pre-rank computed next to
 * the data. Optional key {@code field} (default {@code sentences.vector}). README.md, "Vectors".
 */
public class SdrVectorsExt extends SearchExtBuilder {
    public static final String NAME = "sdr_vectors";

    private final String field;
    private final boolean mean;
    private final float[] centroids;  // null: no centroid rows asked for

    public SdrVectorsExt(String field) {
        this(field, false);
    }

    public SdrVectorsExt(String field, boolean mean) {
        this(field, mean, null);
    }

    public SdrVectorsExt(String field, boolean mean, float[] centroids) {
        if (mean && centroids != null) {
            throw new IllegalArgumentException("[" + NAME + "] [mean] and [centroids] do not go together");
        }
        if (centroids != null) {
            if (centroids.length == 0) {
                throw new IllegalArgumentException("[" + NAME + "] [centroids] is empty");
            }
            for (float v : centroids) {
                if (Float.isFinite(v) == false) {
                    throw new IllegalArgumentException("[" + NAME + "] [centroids] must be finite, got " + v);
                }
            }
        }
        this.mean = mean;
        this.centroids = centroids;
        this.field = field == null ? SdrRescorerBuilder.DEFAULT_FIELD : field;
        int dot = this.field.lastIndexOf('.');
        if (dot <= 0 || dot == this.field.length() - 1) {
            throw new IllegalArgumentException("[" + NAME + "] [field] must be a field of a nested object, as sentences.vector; got ["
                + this.field + "]");
        }
    }

    public SdrVectorsExt(StreamInput in) throws IOException {
        this.field = in.readString();
        this.mean = in.readBoolean();
        this.centroids = in.readBoolean() ? in.readFloatArray() : null;
    }

    @Override
    public void writeTo(StreamOutput out) throws IOException {
        out.writeString(field);
        out.writeBoolean(mean);
        out.writeBoolean(centroids != null);
        if (centroids != null) {
            out.writeFloatArray(centroids);
        }
    }

    /** Whether each hit gets its normalised mean vector instead of its vectors. */
    boolean mean() {
        return mean;
    }

    /** The source's paragraph centroids, row-major (null: no centroid rows asked for). */
    float[] centroids() {
        return centroids;
    }

    String field() {
        return field;
    }

    String paragraphField() {
        return field.substring(0, field.lastIndexOf('.')) + ".paragraph";
    }

    String positionField() {
        return field.substring(0, field.lastIndexOf('.')) + ".position";
    }

    @Override
    public String getWriteableName() {
        return NAME;
    }

    public static SdrVectorsExt fromXContent(XContentParser parser) throws IOException {
        if (parser.currentToken() != XContentParser.Token.START_OBJECT) {
            throw new ParsingException(parser.getTokenLocation(), "[" + NAME + "] expected an object, got " + parser.currentToken());
        }
        String field = null;
        boolean mean = false;
        float[] centroids = null;
        XContentParser.Token token;
        String name = null;
        try (ShardGuard.Charges charges = ParseBreaker.charges("<sdr_vectors centroids>")) {
            while ((token = parser.nextToken()) != XContentParser.Token.END_OBJECT) {
                if (token == XContentParser.Token.FIELD_NAME) {
                    name = parser.currentName();
                    continue;
                }
                try {
                    if ("field".equals(name)) {
                        field = SdrRescorerBuilder.parseString(parser, "field");
                    } else if ("mean".equals(name)) {
                        if (token != XContentParser.Token.VALUE_BOOLEAN) {
                            throw new IllegalArgumentException("[mean] must be true or false, got " + token);
                        }
                        mean = parser.booleanValue();
                    } else if ("centroids".equals(name)) {
                        if (token != XContentParser.Token.VALUE_STRING) {
                            throw new IllegalArgumentException("[centroids] must be a base64 string of little-endian float32 "
                                + "values, got " + token);
                        }
                        centroids = decode(parser, charges);
                    } else {
                        throw new IllegalArgumentException("does not support [" + name + "]: its keys are field, mean, centroids");
                    }
                } catch (IllegalArgumentException e) {
                    throw new ParsingException(parser.getTokenLocation(), "[" + NAME + "] " + e.getMessage());
                }
            }
        }
        try {
            return new SdrVectorsExt(field, mean, centroids);
        } catch (IllegalArgumentException e) {
            throw new ParsingException(parser.getTokenLocation(), e.getMessage());
        }
    }

    /** The centroids the parser is on (base64 float32, decoded from the body), within {@code sdr.limits.max_source_values}. */
    private static float[] decode(XContentParser parser, ShardGuard.Charges charges) throws IOException {
        byte[] bytes = SourceParser.decodeBase64(parser, "centroids");
        charges.add(bytes.length);
        if (bytes.length % Float.BYTES != 0) {
            throw new IllegalArgumentException("[centroids] has " + bytes.length + " bytes, not a whole number of float32 values");
        }
        SdrLimits.checkSourceValues("centroids", bytes.length / Float.BYTES);
        charges.add(bytes.length);
        float[] out = new float[bytes.length / Float.BYTES];
        ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
        return out;
    }

    @Override
    public XContentBuilder toXContent(XContentBuilder builder, Params params) throws IOException {
        builder.startObject(NAME);
        builder.field("field", field);
        if (mean) {
            builder.field("mean", true);
        }
        if (centroids != null) {
            ByteBuffer buffer = ByteBuffer.allocate(centroids.length * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
            buffer.asFloatBuffer().put(centroids);
            builder.field("centroids", Base64.getEncoder().encodeToString(buffer.array()));
        }
        return builder.endObject();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof SdrVectorsExt && ((SdrVectorsExt) o).field.equals(field) && ((SdrVectorsExt) o).mean == mean
            && Arrays.equals(((SdrVectorsExt) o).centroids, centroids);
    }

    @Override
    public int hashCode() {
        return Objects.hash(NAME, field, mean, Arrays.hashCode(centroids));
    }
}
