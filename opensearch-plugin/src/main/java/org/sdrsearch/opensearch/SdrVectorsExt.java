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
import java.util.Objects;

/**
 * {@code "ext": {"sdr_vectors": {}}} on a search: every returned hit gets the field
 * {@code _sdr_vectors} with its sentence vectors as the index holds them (the nested
 * {@code knn_vector} data, no {@code _source}): {@code {"vectors": base64 little-endian float32,
 * row-major, "dim": d, "paragraph_sizes": [...]}}, sentences ordered by (paragraph, position).
 * With {@code "mean": true}, instead of the vectors, {@code "mean"}: the normalised mean sentence
 * vector (base64 float32), what hybrid ranking needs of a candidate besides its SDR score.
 * Optional key {@code field} (default {@code sentences.vector}). README.md, "Vectors".
 */
public class SdrVectorsExt extends SearchExtBuilder {
    public static final String NAME = "sdr_vectors";

    private final String field;
    private final boolean mean;

    public SdrVectorsExt(String field) {
        this(field, false);
    }

    public SdrVectorsExt(String field, boolean mean) {
        this.mean = mean;
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
    }

    @Override
    public void writeTo(StreamOutput out) throws IOException {
        out.writeString(field);
        out.writeBoolean(mean);
    }

    /** Whether each hit gets its normalised mean vector instead of its vectors. */
    boolean mean() {
        return mean;
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
        XContentParser.Token token;
        String name = null;
        while ((token = parser.nextToken()) != XContentParser.Token.END_OBJECT) {
            if (token == XContentParser.Token.FIELD_NAME) {
                name = parser.currentName();
            } else if ("field".equals(name) && token == XContentParser.Token.VALUE_STRING) {
                field = parser.text();
            } else if ("mean".equals(name) && token == XContentParser.Token.VALUE_BOOLEAN) {
                mean = parser.booleanValue();
            } else {
                throw new ParsingException(parser.getTokenLocation(), "[" + NAME + "] does not support [" + name + "]");
            }
        }
        try {
            return new SdrVectorsExt(field, mean);
        } catch (IllegalArgumentException e) {
            throw new ParsingException(parser.getTokenLocation(), e.getMessage());
        }
    }

    @Override
    public XContentBuilder toXContent(XContentBuilder builder, Params params) throws IOException {
        builder.startObject(NAME);
        builder.field("field", field);
        if (mean) {
            builder.field("mean", true);
        }
        return builder.endObject();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof SdrVectorsExt && ((SdrVectorsExt) o).field.equals(field) && ((SdrVectorsExt) o).mean == mean;
    }

    @Override
    public int hashCode() {
        return Objects.hash(NAME, field, mean);
    }
}
