/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.apache.lucene.util.VectorUtil;

import java.util.Arrays;

/**
 * The inner loop of exact SDR: for every source sentence k and candidate paragraph group g, the best
 * dot product {@code best[k * groups + g] = max_{t in g} dot(s_k, c_t)} and the first t reaching it
 * ({@code bestAt}), over a candidate whose sentences are given in sorted order t = 0..m-1 (rows
 * {@code rows[sorted[t]]}, group {@code groupOf[t]}, groups contiguous and ascending in t).
 *
 * <p>Two implementations, chosen once per JVM ({@link #create}):
 * <ul>
 *   <li>{@code panama}: a register-tiled matrix-product kernel on the JDK's vector API
 *       ({@code jdk.incubator.vector}: 4 source rows x 2 blocks of candidate lanes per pass over the
 *       dimension, so each loaded value is used 4 or 2 times; {@code PanamaMatchKernel}). Used when
 *       the JVM was started with {@code --add-modules=jdk.incubator.vector} (OpenSearch's
 *       {@code jvm.options} adds it on Java 20+; on Java 17 add it in {@code jvm.options.d}) and the
 *       preferred vector size is at least 256 bits.</li>
 *   <li>{@code scalar}: one {@link VectorUtil#dotProduct} per (source, candidate) sentence pair
 *       (Lucene's own SIMD where Lucene enabled it, plain Java otherwise).</li>
 * </ul>
 * The system property {@code sdr.kernel=scalar} forces the second. Both are tested against the
 * brute-force SDR. Instances keep scratch space: one per thread.
 */
abstract class MatchKernel {
    private static final Logger LOGGER = LogManager.getLogger(MatchKernel.class);
    private static final String PANAMA_CLASS = "org.sdrsearch.opensearch.PanamaMatchKernel";
    private static volatile Boolean panamaUsable;

    /** The kernel's name, as the node log and {@code _sdr} report it. */
    abstract String name();

    /** See the class comment. {@code best} and {@code bestAt} have at least {@code sentences * groups} cells. */
    abstract void match(SdrSource source, float[][] rows, int[] sorted, int[] groupOf, int m, int groups, float[] best,
                        int[] bestAt);

    /** The fastest kernel this JVM offers. */
    static MatchKernel create() {
        MatchKernel panama = "scalar".equals(System.getProperty("sdr.kernel")) ? null : panama();
        return panama != null ? panama : new Scalar();
    }

    /** The scalar kernel. */
    static MatchKernel scalar() {
        return new Scalar();
    }

    /** The vector-API kernel, or null when this JVM cannot run it (module not added, vectors under 256 bits). */
    static MatchKernel panama() {
        Boolean usable = panamaUsable;
        if (usable != null && usable == false) {
            return null;
        }
        try {
            if (ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent() == false) {
                remember(false, "the JVM lacks --add-modules=jdk.incubator.vector");
                return null;
            }
            Class<?> type = Class.forName(PANAMA_CLASS);
            MatchKernel kernel = (MatchKernel) type.getDeclaredConstructor().newInstance();
            String why = (String) type.getDeclaredMethod("unusable").invoke(null);
            if (why != null) {
                remember(false, why);
                return null;
            }
            remember(true, kernel.name());
            return kernel;
        } catch (ReflectiveOperationException | LinkageError | SecurityException e) {
            remember(false, e.toString());
            return null;
        }
    }

    private static void remember(boolean usable, String detail) {
        if (panamaUsable == null) {
            if (usable) {
                LOGGER.info("sdr: exact SDR scores through the vector API kernel ({})", detail);
            } else {
                LOGGER.info("sdr: exact SDR scores through the scalar kernel (vector API kernel unavailable: {})", detail);
            }
        }
        panamaUsable = usable;
    }

    /** One {@link VectorUtil#dotProduct} per pair, candidate sentences in sorted order. */
    static final class Scalar extends MatchKernel {
        @Override
        String name() {
            return "scalar";
        }

        @Override
        void match(SdrSource source, float[][] rows, int[] sorted, int[] groupOf, int m, int groups, float[] best, int[] bestAt) {
            int sentences = source.sentences();
            Arrays.fill(best, 0, sentences * groups, Float.NEGATIVE_INFINITY);
            for (int t = 0; t < m; t++) {
                float[] v = rows[sorted[t]];
                int g = groupOf[t];
                for (int k = 0; k < sentences; k++) {
                    float d = VectorUtil.dotProduct(source.vector(k), v);
                    int cell = k * groups + g;
                    if (d > best[cell]) {
                        best[cell] = d;
                        bestAt[cell] = t;
                    }
                }
            }
        }
    }
}
