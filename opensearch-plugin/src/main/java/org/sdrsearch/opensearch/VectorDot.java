/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

/**
 * The dot product of two float vectors of the same length on the JDK's vector API
 * ({@code PanamaVectorDot}, compiled apart in {@code src/main/vector} and loaded by reflection, as
 * {@link MatchKernel}'s vector-API kernel is), for {@link GraphProbe}'s HNSW searches. Lucene 9 only
 * vectorises its own dot products on Java 20-22, so on the 2.x line's Java 17 its graph searches
 * compare vectors with scalar Java; this one uses SIMD wherever the JVM was started with
 * {@code --add-modules=jdk.incubator.vector} (the node script adds it on Java 17).
 */
abstract class VectorDot {
    private static final String PANAMA_CLASS = "org.sdrsearch.opensearch.PanamaVectorDot";
    private static volatile VectorDot simd;
    private static volatile boolean looked;

    /** {@code sum_i a[i] * b[i]} over {@code a.length} (b at least as long). */
    abstract float dot(float[] a, float[] b);

    /** The vector-API dot product, or null when this JVM lacks the module or has vectors under 256 bits. */
    static VectorDot simd() {
        if (looked == false) {
            simd = load();
            looked = true;
        }
        return simd;
    }

    private static VectorDot load() {
        try {
            if (ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent() == false) {
                return null;
            }
            Class<?> type = Class.forName(PANAMA_CLASS);
            if (type.getDeclaredMethod("unusable").invoke(null) != null) {
                return null;
            }
            return (VectorDot) type.getDeclaredConstructor().newInstance();
        } catch (ReflectiveOperationException | LinkageError | SecurityException e) {
            return null;
        }
    }
}
