/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.document.BinaryDocValuesField;
import org.apache.lucene.document.Document;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.search.join.QueryBitSetProducer;
import org.apache.lucene.store.ByteBuffersDataOutput;
import org.apache.lucene.store.Directory;
import org.apache.lucene.tests.util.LuceneTestCase;
import org.apache.lucene.tests.util.TestUtil;
import org.apache.lucene.util.BitSet;
import org.apache.lucene.util.BytesRef;
import org.opensearch.common.lucene.search.Queries;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;

/**
 * What the {@code sdr_vectors} ext puts on each hit ({@code _sdr_vectors}): the sentence vectors in
 * (paragraph, position) order, the normalised mean, and the centroid rows against a brute force, from the
 * sentences or from the centroids stored at index time.
 */
public class SdrFetchSubPhaseTests extends LuceneTestCase {
    public void testVectorsEncodeInParagraphAndPositionOrder() {
        CandidateSentences c = new CandidateSentences(2);
        float[][] rows = { { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } };
        long[][] at = { { 1, 3 }, { 0, 1 }, { 1, 2 }, { 0, 0 } };  // (paragraph, position), shuffled
        for (int r = 0; r < 4; r++) {
            System.arraycopy(rows[r], 0, c.add(at[r][0], at[r][1]), 0, 2);
        }
        Map<String, Object> out = SdrFetchSubPhase.encode(c, 2);
        assertEquals(4, out.get("sentences"));
        assertEquals(List.of(2, 2), out.get("paragraph_sizes"));
        float[][] decoded = SdrSource.decodeBase64((String) out.get("vectors"), 4);
        assertTrue(Arrays.deepEquals(new float[][] { { 7, 8 }, { 3, 4 }, { 5, 6 }, { 1, 2 } }, decoded));
        assertEquals(0, SdrFetchSubPhase.encode(null, 0).get("sentences"));
        Map<String, Object> mean = SdrFetchSubPhase.encodeMean(c, 2);
        assertEquals(2, mean.get("paragraphs"));
        float[][] m = SdrSource.decodeBase64((String) mean.get("mean"), 1);
        double norm = Math.sqrt(16 * 16 + 20 * 20);
        assertEquals(16 / norm, m[0][0], 1e-6);
        assertEquals(20 / norm, m[0][1], 1e-6);
    }

    public void testCentroidRowsMatchTheBruteForce() {
        // each source centroid's best cosine with the candidate's paragraph centroids (normalised paragraph means)
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random, 2, 40);
        int[] sizes = { 1, 5, 17, 2 };
        CandidateSentences c = new CandidateSentences(dim);
        float[][][] paragraphs = new float[sizes.length][][];
        List<long[]> at = new ArrayList<>();
        for (int p = 0; p < sizes.length; p++) {
            paragraphs[p] = new float[sizes[p]][dim];
            for (int k = 0; k < sizes[p]; k++) {
                for (int x = 0; x < dim; x++) {
                    paragraphs[p][k][x] = (float) random.nextGaussian();
                }
                at.add(new long[] { p, k });
            }
        }
        Collections.shuffle(at, random);  // read in any order
        for (long[] pk : at) {
            System.arraycopy(paragraphs[(int) pk[0]][(int) pk[1]], 0, c.add(pk[0], pk[1]), 0, dim);
        }
        float[][] source = new float[3][dim];
        for (float[] row : source) {
            double norm = 0;
            for (int x = 0; x < dim; x++) {
                row[x] = (float) random.nextGaussian();
                norm += row[x] * row[x];
            }
            for (int x = 0; x < dim; x++) {
                row[x] /= (float) Math.sqrt(norm);
            }
        }
        Map<String, Object> out = SdrFetchSubPhase.centroidRows(c, dim, source);
        assertEquals(25, out.get("sentences"));
        assertEquals(4, out.get("paragraphs"));
        float[][] rows = SdrSource.decodeBase64((String) out.get("centroid_rows"), 3);  // 3 rows of one value
        assertEquals(3, rows.length);
        for (int i = 0; i < source.length; i++) {
            double best = Double.NEGATIVE_INFINITY;
            for (float[][] paragraph : paragraphs) {
                double[] mean = new double[dim];
                for (float[] v : paragraph) {
                    for (int x = 0; x < dim; x++) {
                        mean[x] += v[x];
                    }
                }
                double norm = 0, dot = 0;
                for (double v : mean) {
                    norm += v * v;
                }
                for (int x = 0; x < dim; x++) {
                    dot += source[i][x] * mean[x] / Math.sqrt(norm);
                }
                best = Math.max(best, dot);
            }
            assertEquals("row " + i, best, rows[i][0], 1e-5);
        }
        Map<String, Object> none = SdrFetchSubPhase.centroidRows(null, 0, new float[0][]);
        assertEquals(0, none.get("sentences"));
        assertNull(none.get("centroid_rows"));
    }

    /** A value of OpenSearch's binary doc values as its {@code binary} field writes it: a vint count, then each value's vint length and bytes. */
    static BytesRef binaryValue(byte[]... values) throws IOException {
        ByteBuffersDataOutput out = new ByteBuffersDataOutput();
        out.writeVInt(values.length);
        for (byte[] v : values) {
            out.writeVInt(v.length);
            out.writeBytes(v, 0, v.length);
        }
        return new BytesRef(out.toArrayCopy());
    }

    static byte[] littleEndian(float[][] rows) {
        ByteBuffer buffer = ByteBuffer.allocate(rows.length * rows[0].length * Float.BYTES).order(ByteOrder.LITTLE_ENDIAN);
        for (float[] row : rows) {
            for (float v : row) {
                buffer.putFloat(v);
            }
        }
        return buffer.array();
    }

    public void testStoredCentroidsAreOneValueOfWholeFiniteRows() throws IOException {
        float[][] rows = { { 1, 0, 0 }, { 0, 0.6f, 0.8f } };
        byte[] bytes = littleEndian(rows);
        assertTrue(Arrays.deepEquals(rows, StoredCentroids.decode(binaryValue(bytes), 3)));
        BytesRef shifted = binaryValue(bytes);  // a value inside a larger buffer (an offset), as doc values give it
        byte[] padded = new byte[shifted.length + 7];
        System.arraycopy(shifted.bytes, shifted.offset, padded, 5, shifted.length);
        assertTrue(Arrays.deepEquals(rows, StoredCentroids.decode(new BytesRef(padded, 5, shifted.length), 3)));
        assertNull("another dimension", StoredCentroids.decode(binaryValue(bytes), 4));
        assertNull("not whole rows", StoredCentroids.decode(binaryValue(Arrays.copyOf(bytes, bytes.length - 4)), 3));
        assertNull("two values", StoredCentroids.decode(binaryValue(bytes, bytes), 3));
        assertNull("no value", StoredCentroids.decode(binaryValue(), 3));
        assertNull("empty", StoredCentroids.decode(binaryValue(new byte[0]), 3));
        assertNull("not finite", StoredCentroids.decode(binaryValue(littleEndian(new float[][] { { 1, Float.NaN, 0 } })), 3));
        BytesRef cut = binaryValue(bytes);
        assertNull("cut short", StoredCentroids.decode(new BytesRef(cut.bytes, cut.offset, cut.length - 1), 3));
    }

    /**
     * On a Lucene index laid out as OpenSearch's nested mapping (SdrRescorerTests' blocks), some parents with stored
     * centroids: those read them (one value, and the sentences counted), the others read their sentences, and both
     * give the rows the brute force gives; a parent whose stored value is of another dimension falls back to its sentences.
     */
    public void testStoredCentroidsGiveTheRowsOfTheSentences() throws IOException {
        Random random = new Random(random().nextLong());
        int dim = TestUtil.nextInt(random, 2, 24);
        int n = 12;
        float[][][][] docs = new float[n][][][];
        try (Directory dir = newDirectory()) {
            boolean[] storedAt = new boolean[n];
            try (IndexWriter writer = new IndexWriter(dir, newIndexWriterConfig())) {
                for (int d = 0; d < n; d++) {
                    docs[d] = new float[TestUtil.nextInt(random, 1, 5)][][];
                    for (int p = 0; p < docs[d].length; p++) {
                        docs[d][p] = new float[TestUtil.nextInt(random, 1, 6)][];
                        for (int k = 0; k < docs[d][p].length; k++) {
                            docs[d][p][k] = BruteForceSdr.unit(random, dim);
                        }
                    }
                    List<Document> block = SdrRescorerTests.block(new SdrRescorerTests.Candidate("d" + d, docs[d]), random);
                    Document parent = block.get(block.size() - 1);
                    storedAt[d] = d % 3 != 2;
                    if (storedAt[d]) {
                        parent.add(new BinaryDocValuesField(StoredCentroids.FIELD, binaryValue(littleEndian(centroids(docs[d])))));
                    } else if (d % 2 == 0) {  // a value of another dimension: not used
                        parent.add(new BinaryDocValuesField(StoredCentroids.FIELD, binaryValue(new byte[(dim + 1) * Float.BYTES])));
                    }
                    writer.addDocuments(block);
                    if (random.nextInt(4) == 0) {
                        writer.flush();
                    }
                }
            }
            float[][] source = new float[TestUtil.nextInt(random, 1, 4)][];
            for (int i = 0; i < source.length; i++) {
                source[i] = BruteForceSdr.unit(random, dim);
            }
            CentroidMatcher matcher = new CentroidMatcher(source);
            BitSetProducer parents = new QueryBitSetProducer(Queries.newNonNestedFilter());
            int seen = 0, fromStored = 0;
            try (DirectoryReader reader = DirectoryReader.open(dir)) {
                for (LeafReaderContext leaf : reader.leaves()) {
                    StoredCentroids stored = StoredCentroids.open(leaf.reader(), dim);
                    CandidateReader counts = new CandidateReader(leaf, parents, "sentences.vector", "sentences.paragraph",
                        "sentences.position", dim);
                    CandidateReader sentences = new CandidateReader(leaf, parents, "sentences.vector", "sentences.paragraph",
                        "sentences.position", dim);
                    CandidateSentences c = new CandidateSentences(dim);
                    BitSet bits = parents.getBitSet(leaf);
                    for (int doc = bits.nextSetBit(0); doc != org.apache.lucene.search.DocIdSetIterator.NO_MORE_DOCS;
                         doc = doc + 1 < leaf.reader().maxDoc() ? bits.nextSetBit(doc + 1) : org.apache.lucene.search.DocIdSetIterator.NO_MORE_DOCS) {
                        int d = Integer.parseInt(leaf.reader().storedFields().document(doc).get("id").substring(1));
                        float[][] own = stored == null ? null : stored.read(doc);
                        assertEquals("document " + d, storedAt[d], own != null);
                        int count = counts.read(doc, null);
                        sentences.read(doc, c);
                        assertEquals(c.size(), count);
                        Map<String, Object> got = own != null ? SdrFetchSubPhase.rowsOf(own, count, matcher)
                            : SdrFetchSubPhase.centroidRows(c, dim, source);
                        fromStored += own != null ? 1 : 0;
                        assertEquals(count, got.get("sentences"));
                        assertEquals(docs[d].length, got.get("paragraphs"));
                        float[][] rows = SdrSource.decodeBase64((String) got.get("centroid_rows"), source.length);
                        float[][] expected = SdrSource.decodeBase64(
                            (String) SdrFetchSubPhase.centroidRows(c, dim, source).get("centroid_rows"), source.length);
                        for (int i = 0; i < source.length; i++) {
                            assertEquals("document " + d + " row " + i, bruteForceRow(source[i], docs[d]), rows[i][0], 1e-5);
                            assertEquals(expected[i][0], rows[i][0], 1e-5);
                        }
                        seen++;
                    }
                }
            }
            assertEquals(n, seen);
            assertTrue(fromStored > 0);
        }
    }

    /** Each paragraph's normalised mean (float32, as sdr-search writes them). */
    private static float[][] centroids(float[][][] paragraphs) {
        float[][] out = new float[paragraphs.length][];
        for (int p = 0; p < paragraphs.length; p++) {
            int dim = paragraphs[p][0].length;
            double[] sum = new double[dim];
            for (float[] v : paragraphs[p]) {
                for (int x = 0; x < dim; x++) {
                    sum[x] += v[x];
                }
            }
            double norm = 0;
            for (double v : sum) {
                norm += v * v;
            }
            out[p] = new float[dim];
            for (int x = 0; x < dim; x++) {
                out[p][x] = (float) (sum[x] / Math.sqrt(norm));
            }
        }
        return out;
    }

    private static double bruteForceRow(float[] source, float[][][] paragraphs) {
        double best = Double.NEGATIVE_INFINITY;
        for (float[] centroid : centroids(paragraphs)) {
            double dot = 0;
            for (int x = 0; x < source.length; x++) {
                dot += source[x] * centroid[x];
            }
            best = Math.max(best, dot);
        }
        return best;
    }
}
