/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.BinaryDocValues;
import org.apache.lucene.index.DocValuesType;
import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.store.ByteArrayDataInput;
import org.apache.lucene.util.BytesRef;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/**
 * A document's paragraph centroids as sdr-search wrote them at index time: the binary doc values of the
 * top-level field {@link #FIELD} (a {@code binary} field with {@code doc_values: true}; little-endian float32,
 * one row of {@code dim} values per paragraph, each paragraph's normalised mean sentence vector). The centroid
 * pre-rank's rows then read one value per candidate instead of every sentence vector of it (README.md,
 * "Vectors"). An index written without the field, a document without a value, or a value that is not whole
 * rows of this dimension reads as null: the caller computes the centroids from the sentences, as before.
 *
 * <p>One per segment and search; forward-only, as {@link CandidateReader}: call {@link #read} with increasing
 * (segment-local) parent doc ids.
 */
final class StoredCentroids {
    /** The top-level field sdr-search's index mapping ({@code mappings/index.json}) keeps the centroids in. */
    static final String FIELD = "par_centroids";

    private final BinaryDocValues values;
    private final int dim;
    private int last = -1;

    private StoredCentroids(BinaryDocValues values, int dim) {
        this.values = values;
        this.dim = dim;
    }

    /** The reader of {@code reader}'s stored centroids, or null when the segment has none (an index made before them). */
    static StoredCentroids open(LeafReader reader, int dim) throws IOException {
        FieldInfo info = reader.getFieldInfos().fieldInfo(FIELD);
        if (info == null || info.getDocValuesType() != DocValuesType.BINARY || dim <= 0) {
            return null;
        }
        BinaryDocValues values = reader.getBinaryDocValues(FIELD);
        return values == null ? null : new StoredCentroids(values, dim);
    }

    /** The stored centroids of parent document {@code parent} (one row per paragraph), or null (see the class comment). */
    float[][] read(int parent) throws IOException {
        if (parent <= last) {
            throw new IllegalStateException("stored centroids must be read in increasing doc id order: " + parent + " after " + last);
        }
        last = parent;
        if (values.docID() > parent || values.advanceExact(parent) == false) {
            return null;
        }
        return decode(values.binaryValue(), dim);
    }

    /**
     * The rows of one value of OpenSearch's {@code binary} doc values ({@code BinaryFieldMapper}: a vint count of
     * values, then each value as a vint length and its bytes); null unless it holds exactly one value of whole,
     * finite rows of {@code dim} float32.
     */
    static float[][] decode(BytesRef ref, int dim) {
        ByteArrayDataInput in = new ByteArrayDataInput(ref.bytes, ref.offset, ref.length);
        if (ref.length == 0 || in.readVInt() != 1 || in.eof()) {
            return null;
        }
        int length = in.readVInt();
        int at = in.getPosition();
        long rowBytes = (long) dim * Float.BYTES;
        if (length <= 0 || length % rowBytes != 0 || length > ref.offset + ref.length - at) {
            return null;
        }
        FloatBuffer floats = ByteBuffer.wrap(ref.bytes, at, length).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        float[][] rows = new float[(int) (length / rowBytes)][dim];
        for (float[] row : rows) {
            floats.get(row);
            for (float v : row) {
                if (Float.isFinite(v) == false) {
                    return null;
                }
            }
        }
        return rows;
    }
}
