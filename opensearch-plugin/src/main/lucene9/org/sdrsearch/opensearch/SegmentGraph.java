/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.codecs.KnnVectorsReader;
import org.apache.lucene.codecs.hnsw.HnswGraphProvider;
import org.apache.lucene.index.FloatVectorValues;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.hnsw.HnswGraph;
import org.apache.lucene.util.hnsw.RandomAccessVectorValues;

import java.io.IOException;

/**
 * One segment's HNSW graph of a vector field and random access to its vectors by ordinal, read from
 * the codec (Lucene 9: the vectors are {@link RandomAccessVectorValues.Floats}). The 3.x line's copy
 * (Lucene 10: {@code FloatVectorValues} are themselves random access) is in {@code src/main/lucene10}.
 * Not thread-safe: one per thread.
 */
final class SegmentGraph {
    private final HnswGraph graph;
    private final RandomAccessVectorValues.Floats vectors;

    private SegmentGraph(HnswGraph graph, RandomAccessVectorValues.Floats vectors) {
        this.graph = graph;
        this.vectors = vectors;
    }

    /** Whether Lucene compares vectors with SIMD on this JVM (Lucene 9.12: on Java 20 to 22, with the vector module). */
    static boolean luceneVectorises() {
        int feature = Runtime.version().feature();
        return feature >= 20 && feature <= 22 && ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent();
    }

    /**
     * The graph and vectors of {@code field} in {@code reader}, or null when the segment's format does not
     * expose them (not an HNSW format, a wrapped reader): the caller then searches through Lucene's query.
     */
    static SegmentGraph open(LeafReader reader, String field) throws IOException {
        KnnVectorsReader vectorsReader = GraphProbe.hnswReader(reader, field);
        if (vectorsReader == null) {
            return null;
        }
        FloatVectorValues values = vectorsReader.getFloatVectorValues(field);
        HnswGraph graph = ((HnswGraphProvider) vectorsReader).getGraph(field);
        if ((values instanceof RandomAccessVectorValues.Floats) == false || graph == null) {
            return null;
        }
        return new SegmentGraph(graph, (RandomAccessVectorValues.Floats) values);
    }

    HnswGraph graph() {
        return graph;
    }

    /** How many vectors (ordinals 0..size-1). */
    int size() {
        return vectors.size();
    }

    /** The vector of ordinal {@code ord}, valid until the next call. */
    float[] vector(int ord) throws IOException {
        return vectors.vectorValue(ord);
    }

    int ordToDoc(int ord) {
        return vectors.ordToDoc(ord);
    }

    /** The ordinals whose documents {@code acceptDocs} accepts (null: all). */
    Bits acceptOrds(Bits acceptDocs) {
        return vectors.getAcceptOrds(acceptDocs);
    }
}
