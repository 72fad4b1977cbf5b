/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

/** {@link VectorDot} on the JDK's vector API: four fused multiply-add accumulators of the preferred width. */
final class PanamaVectorDot extends VectorDot {
    private static final VectorSpecies<Float> SPECIES = FloatVector.SPECIES_PREFERRED;
    private static final int L = SPECIES.length();

    /** Null when this JVM can run it well, else why not. */
    static String unusable() {
        return SPECIES.vectorBitSize() < 256 ? "the preferred vector size is " + SPECIES.vectorBitSize() + " bits" : null;
    }

    @Override
    float dot(float[] a, float[] b) {
        int n = a.length;
        int i = 0;
        FloatVector acc0 = FloatVector.zero(SPECIES);
        FloatVector acc1 = FloatVector.zero(SPECIES);
        FloatVector acc2 = FloatVector.zero(SPECIES);
        FloatVector acc3 = FloatVector.zero(SPECIES);
        for (; i + 4 * L <= n; i += 4 * L) {
            acc0 = FloatVector.fromArray(SPECIES, a, i).fma(FloatVector.fromArray(SPECIES, b, i), acc0);
            acc1 = FloatVector.fromArray(SPECIES, a, i + L).fma(FloatVector.fromArray(SPECIES, b, i + L), acc1);
            acc2 = FloatVector.fromArray(SPECIES, a, i + 2 * L).fma(FloatVector.fromArray(SPECIES, b, i + 2 * L), acc2);
            acc3 = FloatVector.fromArray(SPECIES, a, i + 3 * L).fma(FloatVector.fromArray(SPECIES, b, i + 3 * L), acc3);
        }
        for (; i + L <= n; i += L) {
            acc0 = FloatVector.fromArray(SPECIES, a, i).fma(FloatVector.fromArray(SPECIES, b, i), acc0);
        }
        float sum = acc0.add(acc1).add(acc2.add(acc3)).reduceLanes(VectorOperators.ADD);
        for (; i < n; i++) {
            sum += a[i] * b[i];
        }
        return sum;
    }
}
