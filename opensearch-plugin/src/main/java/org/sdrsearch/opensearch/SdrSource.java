/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.common.io.stream.Writeable;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Arrays;
import java.util.Base64;

/**
 * The source document of an SDR query, as the request gives it: its sentence vectors, its paragraph
 * boundaries, and the corpus statistics mu_i / sigma_i of each of its paragraphs (SPEC, "Two-stage
 * score"). Immutable and validated: every constructor path goes through {@link #of}, which throws
 * {@link IllegalArgumentException} with a message naming the request field.
 */
public final class SdrSource implements Writeable {
    /** SPEC: "If sigma_i &lt; 1e-6, use 1." */
    static final double SIGMA_FLOOR = 1e-6;

    private final int dim;
    private final float[][] vectors;      // one row per source sentence, in paragraph order
    private final int[] paragraphSizes;   // sentences per paragraph, each >= 1, sum = vectors.length
    private final int[] paragraphStarts;  // paragraphSizes' prefix sums, length n + 1
    private final double[] mu;
    private final double[] sigma;         // as sent
    private final double[] sigmaUsed;     // sigma, with values < SIGMA_FLOOR replaced by 1
    private final int[] parts;            // paragraphs per merged source part; null: one part

    private SdrSource(float[][] vectors, int[] paragraphSizes, double[] mu, double[] sigma, int[] parts) {
        this.dim = vectors[0].length;
        this.vectors = vectors;
        this.paragraphSizes = paragraphSizes;
        this.paragraphStarts = new int[paragraphSizes.length + 1];
        for (int i = 0; i < paragraphSizes.length; i++) {
            paragraphStarts[i + 1] = paragraphStarts[i] + paragraphSizes[i];
        }
        this.mu = mu;
        this.sigma = sigma;
        this.sigmaUsed = new double[sigma.length];
        for (int i = 0; i < sigma.length; i++) {
            sigmaUsed[i] = sigma[i] < SIGMA_FLOOR ? 1.0 : sigma[i];
        }
        this.parts = parts;
    }

    /**
     * Validates and builds a source.
     *
     * @param vectors        one float row per sentence (all rows of one length, finite values)
     * @param paragraphSizes sentences per paragraph (each at least 1, adding up to the number of rows)
     * @param mu             per paragraph, finite
     * @param sigma          per paragraph, finite and not negative (below 1e-6 counts as 1)
     * @param parts          null, or paragraphs per part when several sources are merged (each at least 1,
     *                       adding up to the number of paragraphs): the score is then the mean over parts of
     *                       each part's own mean
     * @throws IllegalArgumentException naming the field at fault
     */
    public static SdrSource of(float[][] vectors, int[] paragraphSizes, double[] mu, double[] sigma, int[] parts) {
        if (vectors == null) {
            throw new IllegalArgumentException("[vectors] is required: the source's sentence vectors");
        }
        if (vectors.length == 0) {
            throw new IllegalArgumentException("empty source: [vectors] holds no sentence");
        }
        int d = vectors[0] == null ? 0 : vectors[0].length;
        if (d == 0) {
            throw new IllegalArgumentException("[vectors] sentence 0 has no value");
        }
        for (int k = 0; k < vectors.length; k++) {
            float[] row = vectors[k];
            if (row == null || row.length != d) {
                throw new IllegalArgumentException(
                    "[vectors] sentence " + k + " has " + (row == null ? 0 : row.length) + " values, sentence 0 has " + d
                );
            }
            for (int x = 0; x < d; x++) {
                if (Float.isFinite(row[x]) == false) {
                    throw new IllegalArgumentException("[vectors] sentence " + k + " holds " + row[x] + " at dimension " + x
                        + ": every value must be finite");
                }
            }
        }
        if (paragraphSizes == null) {
            throw new IllegalArgumentException("[paragraph_sizes] is required: the number of sentences of each source paragraph");
        }
        if (paragraphSizes.length == 0) {
            throw new IllegalArgumentException("empty source: [paragraph_sizes] names no paragraph");
        }
        long total = 0;
        for (int i = 0; i < paragraphSizes.length; i++) {
            if (paragraphSizes[i] < 1) {
                throw new IllegalArgumentException("[paragraph_sizes] paragraph " + i + " has " + paragraphSizes[i]
                    + " sentences: every paragraph needs at least one (drop empty paragraphs)");
            }
            total += paragraphSizes[i];
        }
        if (total != vectors.length) {
            throw new IllegalArgumentException("[paragraph_sizes] add up to " + total + " sentences but [vectors] holds "
                + vectors.length);
        }
        int n = paragraphSizes.length;
        checkStatistics("mu", mu, n, false);
        checkStatistics("sigma", sigma, n, true);
        if (parts != null) {
            if (parts.length == 0) {
                throw new IllegalArgumentException("[parts] is empty: leave it out for one source");
            }
            long sum = 0;
            for (int p = 0; p < parts.length; p++) {
                if (parts[p] < 1) {
                    throw new IllegalArgumentException("[parts] part " + p + " has " + parts[p] + " paragraphs: each needs at least one");
                }
                sum += parts[p];
            }
            if (sum != n) {
                throw new IllegalArgumentException("[parts] add up to " + sum + " paragraphs but the source has " + n);
            }
        }
        return new SdrSource(vectors, paragraphSizes, mu, sigma, parts);
    }

    private static void checkStatistics(String name, double[] values, int n, boolean isSigma) {
        if (values == null) {
            throw new IllegalArgumentException("[" + name + "] is required: one corpus statistic per source paragraph "
                + "(send mu 0 and sigma 1 for no normalisation)");
        }
        if (values.length != n) {
            throw new IllegalArgumentException("[" + name + "] has " + values.length + " values for " + n + " source paragraphs");
        }
        for (int i = 0; i < n; i++) {
            if (Double.isFinite(values[i]) == false) {
                throw new IllegalArgumentException("[" + name + "] value " + i + " is " + values[i] + ": statistics must be finite");
            }
            if (isSigma && values[i] < 0) {
                throw new IllegalArgumentException("[sigma] value " + i + " is negative (" + values[i] + ")");
            }
        }
    }

    /**
     * Rows of {@code sentences} vectors from base64 of little-endian float32 values, row-major (the
     * layout of numpy's {@code array.astype('<f4').tobytes()}); the dimension is the number of
     * values divided by {@code sentences}.
     */
    public static float[][] decodeBase64(String b64, int sentences) {
        byte[] raw;
        try {
            raw = Base64.getDecoder().decode(b64);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("[vectors] is not valid base64: " + e.getMessage());
        }
        return rowsOf(raw, sentences);
    }

    /** Rows of {@code sentences} vectors from little-endian float32 values, row-major ({@link #decodeBase64}'s bytes). */
    static float[][] rowsOf(byte[] raw, int sentences) {
        if (raw.length == 0) {
            throw new IllegalArgumentException("empty source: [vectors] holds no sentence");
        }
        if (raw.length % Float.BYTES != 0) {
            throw new IllegalArgumentException("[vectors] holds " + raw.length + " bytes, not a whole number of float32 values");
        }
        int values = raw.length / Float.BYTES;
        if (sentences < 1) {
            throw new IllegalArgumentException("empty source: [paragraph_sizes] names no sentence");
        }
        if (values % sentences != 0) {
            throw new IllegalArgumentException("[vectors] holds " + values + " float32 values, not a whole number of rows for "
                + sentences + " sentences (the sum of [paragraph_sizes])");
        }
        int d = values / sentences;
        FloatBuffer buffer = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        float[][] rows = new float[sentences][d];
        for (int k = 0; k < sentences; k++) {
            buffer.get(rows[k]);
        }
        return rows;
    }

    /** The vectors as base64 of little-endian float32 values, row-major (inverse of {@link #decodeBase64}). */
    public String vectorsBase64() {
        ByteBuffer buffer = ByteBuffer.allocate(vectors.length * dim * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        for (float[] row : vectors) {
            for (float v : row) {
                buffer.putFloat(v);
            }
        }
        return Base64.getEncoder().encodeToString(buffer.array());
    }

    public SdrSource(StreamInput in) throws IOException {
        this(readVectors(in), in.readVIntArray(), in.readDoubleArray(), in.readDoubleArray(),
            in.readBoolean() ? in.readVIntArray() : null);
    }

    private static float[][] readVectors(StreamInput in) throws IOException {
        int n = in.readVInt();
        int d = in.readVInt();
        float[] flat = in.readFloatArray();
        if (flat.length != n * d) {
            throw new IOException("corrupt sdr source: " + flat.length + " values for " + n + " x " + d);
        }
        float[][] rows = new float[n][];
        for (int k = 0; k < n; k++) {
            rows[k] = Arrays.copyOfRange(flat, k * d, (k + 1) * d);
        }
        return rows;
    }

    @Override
    public void writeTo(StreamOutput out) throws IOException {
        out.writeVInt(vectors.length);
        out.writeVInt(dim);
        float[] flat = new float[vectors.length * dim];
        for (int k = 0; k < vectors.length; k++) {
            System.arraycopy(vectors[k], 0, flat, k * dim, dim);
        }
        out.writeFloatArray(flat);
        out.writeVIntArray(paragraphSizes);
        out.writeDoubleArray(mu);
        out.writeDoubleArray(sigma);
        out.writeBoolean(parts != null);
        if (parts != null) {
            out.writeVIntArray(parts);
        }
    }

    public int dim() {
        return dim;
    }

    public int sentences() {
        return vectors.length;
    }

    public int paragraphs() {
        return paragraphSizes.length;
    }

    float[] vector(int k) {
        return vectors[k];
    }

    /** Index of paragraph i's first sentence; {@code paragraphStart(n)} is the number of sentences. */
    int paragraphStart(int i) {
        return paragraphStarts[i];
    }

    int[] paragraphSizes() {
        return paragraphSizes.clone();
    }

    double mu(int i) {
        return mu[i];
    }

    /** sigma_i as sent. */
    double sigma(int i) {
        return sigma[i];
    }

    /** sigma_i as used: 1 where sigma_i &lt; 1e-6. */
    double sigmaUsed(int i) {
        return sigmaUsed[i];
    }

    double[] muArray() {
        return mu.clone();
    }

    double[] sigmaArray() {
        return sigma.clone();
    }

    /** Paragraphs per part, or null for one part. */
    int[] parts() {
        return parts == null ? null : parts.clone();
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) {
            return true;
        }
        if (o == null || getClass() != o.getClass()) {
            return false;
        }
        SdrSource other = (SdrSource) o;
        return Arrays.deepEquals(vectors, other.vectors)
            && Arrays.equals(paragraphSizes, other.paragraphSizes)
            && Arrays.equals(mu, other.mu)
            && Arrays.equals(sigma, other.sigma)
            && Arrays.equals(parts, other.parts);
    }

    @Override
    public int hashCode() {
        int h = Arrays.deepHashCode(vectors);
        h = 31 * h + Arrays.hashCode(paragraphSizes);
        h = 31 * h + Arrays.hashCode(mu);
        h = 31 * h + Arrays.hashCode(sigma);
        return 31 * h + Arrays.hashCode(parts);
    }
}
