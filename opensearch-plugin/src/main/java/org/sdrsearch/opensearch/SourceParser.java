/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.lease.Releasable;
import org.opensearch.core.xcontent.XContentParser;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Reads a request's source vectors (the {@code vectors} field of the {@code sdr} rescorer and of
 * {@code sdr_candidates}) within the node's limits ({@link SdrLimits}), charging what it builds to the
 * {@code sdr_parse} breaker ({@link ParseBreaker}) until {@link #close}.
 *
 * <p>Base64 is decoded by the XContent parser from the request body itself ({@code binaryValue()}: Jackson
 * decodes the string token from its input), so the body's text is never copied into a Java string; the decoded
 * bytes are checked against {@code sdr.limits.max_source_values} and charged at once, and the float rows are
 * built only when the whole clause has been read ({@link #rows}): after the number of sentences
 * ({@code paragraph_sizes}, which may come after {@code vectors}) has been checked against
 * {@code sdr.limits.max_source_sentences} and the rows charged. A JSON array of rows is refused as soon as it
 * passes either limit. Errors are {@link IllegalArgumentException}s naming the field; the builders turn them
 * into 400s.
 */
final class SourceParser implements Releasable {
    static final String VECTORS = "vectors";
    /** Bytes a float row costs besides its values (array header and reference). */
    static final long ROW_OVERHEAD = 24;

    private final ShardGuard.Charges charges = ParseBreaker.charges("<sdr source>");
    private byte[] raw;        // base64 vectors, decoded
    private float[][] rows;    // vectors as JSON arrays

    /** Whether a {@code vectors} field was read. */
    boolean hasVectors() {
        return raw != null || rows != null;
    }

    /** Reads the value of {@code vectors} (the parser is on it): a base64 string or an array of float arrays. */
    void readVectors(XContentParser parser) throws IOException {
        XContentParser.Token token = parser.currentToken();
        raw = null;
        rows = null;
        if (token == XContentParser.Token.VALUE_STRING) {
            raw = decodeBase64(parser, VECTORS);
            charges.add(raw.length);
            if (raw.length % Float.BYTES != 0) {
                throw new IllegalArgumentException("[" + VECTORS + "] holds " + raw.length + " bytes, not a whole number of "
                    + "float32 values");
            }
            SdrLimits.checkSourceValues(VECTORS, raw.length / Float.BYTES);
        } else if (token == XContentParser.Token.START_ARRAY) {
            rows = parseRows(parser, charges);
        } else {
            throw new IllegalArgumentException("[" + VECTORS + "] must be a base64 string of little-endian float32 values or "
                + "an array of float arrays, got " + token);
        }
    }

    /**
     * The source rows, for {@code sentences} sentences (the sum of {@code paragraph_sizes}; base64 is split into
     * that many rows). Checks the number of sentences against the limit and charges the rows before building them.
     */
    float[][] rows(long sentences) {
        if (rows != null) {
            return rows;
        }
        if (raw == null) {
            throw new IllegalArgumentException("[" + VECTORS + "] is required: the source's sentence vectors");
        }
        if (raw.length == 0) {
            throw new IllegalArgumentException("empty source: [" + VECTORS + "] holds no sentence");
        }
        SdrLimits.checkSourceSentences(VECTORS, sentences);
        charges.add(raw.length + sentences * ROW_OVERHEAD);
        return SdrSource.rowsOf(raw, (int) sentences);
    }

    @Override
    public void close() {
        raw = null;
        charges.close();
    }

    /**
     * A base64 string value, decoded by the parser from its input (no copy of the text); an error naming
     * {@code field} when it is not valid base64.
     */
    static byte[] decodeBase64(XContentParser parser, String field) throws IOException {
        try {
            return parser.binaryValue();
        } catch (IllegalArgumentException | IllegalStateException e) {
            throw new IllegalArgumentException("[" + field + "] is not valid base64: " + e.getMessage(), e);
        } catch (IOException e) {
            if (e.getClass().getName().startsWith("com.fasterxml.jackson") || e.getClass().getSimpleName().contains("Parse")) {
                throw new IllegalArgumentException("[" + field + "] is not valid base64: " + firstLine(e.getMessage()), e);
            }
            throw e;
        }
    }

    private static String firstLine(String message) {
        if (message == null) {
            return "";
        }
        int nl = message.indexOf('\n');
        return nl < 0 ? message : message.substring(0, nl);
    }

    /**
     * The rows of the array of float arrays the parser is on (START_ARRAY), refused as soon as they pass
     * {@code sdr.limits.max_source_sentences} rows or {@code sdr.limits.max_source_values} values; charged as read.
     */
    static float[][] parseRows(XContentParser parser, ShardGuard.Charges charges) throws IOException {
        List<float[]> out = new ArrayList<>();
        long values = 0;
        XContentParser.Token token;
        while ((token = parser.nextToken()) != XContentParser.Token.END_ARRAY) {
            if (token != XContentParser.Token.START_ARRAY) {
                throw new IllegalArgumentException("[" + VECTORS + "] sentence " + out.size() + " must be an array of numbers, got "
                    + token);
            }
            SdrLimits.checkSourceSentences(VECTORS, out.size() + 1L);
            long before = values;
            double[] row = parseNumbers(parser, VECTORS + "] sentence [" + out.size(), SdrLimits.maxSourceValues() - values,
                n -> SdrLimits.checkSourceValues(VECTORS, before + n));
            values += row.length;
            float[] floats = new float[row.length];
            for (int x = 0; x < row.length; x++) {
                floats[x] = (float) row[x];
            }
            if (charges != null) {
                charges.add(floats.length * (long) Float.BYTES + ROW_OVERHEAD);
            }
            out.add(floats);
        }
        return out.toArray(new float[0][]);
    }

    /**
     * The numbers of the array the parser is on (START_ARRAY); past {@code max} of them {@code overLimit} gets the
     * count (and throws: the caller's limit), so an array over a limit is never read whole. NaN and infinities pass
     * here and are refused by SdrSource.
     */
    static double[] parseNumbers(XContentParser parser, String name, long max, java.util.function.LongConsumer overLimit)
        throws IOException {
        double[] out = new double[16];
        int size = 0;
        XContentParser.Token token;
        while ((token = parser.nextToken()) != XContentParser.Token.END_ARRAY) {
            if (token != XContentParser.Token.VALUE_NUMBER) {
                throw new IllegalArgumentException("[" + name + "] value " + size + " must be a number, got " + token);
            }
            if (size >= max) {
                overLimit.accept(size + 1L);
                throw new IllegalArgumentException("[" + name + "] holds more than " + max + " values");
            }
            if (size == out.length) {
                out = Arrays.copyOf(out, size * 2);
            }
            out[size++] = parser.doubleValue();
        }
        return Arrays.copyOf(out, size);
    }
}
