/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Base64;
import java.util.Random;

/**
 * Sources for the tests of the request objects: the request's vector encoding, random valid
 * sources and one-field changes of a source (the mutations of the equals/hashCode tests).
 */
final class TestSources {
    private TestSources() {}

    /** Float32 values as a request sends them: base64 of little-endian float32. */
    static String b64(float... values) {
        ByteBuffer buffer = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (float v : values) {
            buffer.putFloat(v);
        }
        return Base64.getEncoder().encodeToString(buffer.array());
    }

    /**
     * A random valid source of 1 to 4 paragraphs of 1 to 3 sentences, 1 to 8 dimensions.
     *
     * @param statistics false: mu 0 and sigma 1 (what sdr_candidates takes when a request has no statistics)
     * @param parts      whether merged parts may be drawn (sdr_candidates has none)
     */
    static SdrSource random(Random random, boolean statistics, boolean parts) {
        int n = 1 + random.nextInt(4);
        int[] sizes = new int[n];
        for (int i = 0; i < n; i++) {
            sizes[i] = 1 + random.nextInt(3);
        }
        float[][][] doc = BruteForceSdr.document(random, 1 + random.nextInt(8), sizes);
        double[] mu = new double[n];
        double[] sigma = new double[n];
        for (int i = 0; i < n; i++) {
            mu[i] = statistics ? random.nextGaussian() : 0;
            sigma[i] = statistics ? randomSigma(random) : 1;
        }
        int[] split = null;
        if (parts && random.nextBoolean()) {
            int first = 1 + random.nextInt(n);
            split = first == n ? new int[] { n } : new int[] { first, n - first };
        }
        return SdrSource.of(BruteForceSdr.rows(doc), sizes, mu, sigma, split);
    }

    /** Not negative, sometimes below the 1e-6 floor (0 or tiny: used as 1, yet sent and compared as given). */
    private static double randomSigma(Random random) {
        switch (random.nextInt(4)) {
            case 0: return 0;
            case 1: return 1e-9;
            default: return random.nextDouble() * 2;
        }
    }

    /**
     * A valid source that differs from {@code source} in one respect: a vector value, one more paragraph,
     * mu or sigma (with {@code statistics}), or the parts (with {@code parts}).
     */
    static SdrSource mutate(Random random, SdrSource source, boolean statistics, boolean parts) {
        float[][] vectors = new float[source.sentences()][];
        for (int k = 0; k < vectors.length; k++) {
            vectors[k] = source.vector(k).clone();
        }
        int[] sizes = source.paragraphSizes();
        double[] mu = source.muArray();
        double[] sigma = source.sigmaArray();
        int[] split = source.parts();
        int n = sizes.length;
        int choice = random.nextInt(statistics && parts ? 5 : statistics ? 4 : parts ? 3 : 2);
        if (choice >= 2 && statistics == false) {
            choice = 4;  // the parts
        }
        switch (choice) {
            case 0: {
                int k = random.nextInt(vectors.length);
                int x = random.nextInt(source.dim());
                vectors[k][x] = vectors[k][x] == 0.5f ? 0.25f : 0.5f;
                break;
            }
            case 1: {  // one more paragraph of one sentence
                vectors = Arrays.copyOf(vectors, vectors.length + 1);
                vectors[vectors.length - 1] = BruteForceSdr.unit(random, source.dim());
                sizes = Arrays.copyOf(sizes, n + 1);
                sizes[n] = 1;
                mu = Arrays.copyOf(mu, n + 1);
                mu[n] = statistics ? random.nextGaussian() : 0;
                sigma = Arrays.copyOf(sigma, n + 1);
                sigma[n] = statistics ? randomSigma(random) : 1;
                if (split != null) {
                    split[split.length - 1]++;
                }
                break;
            }
            case 2: {
                int i = random.nextInt(n);
                mu[i] = mu[i] == 0.5 ? 0.25 : 0.5;
                break;
            }
            case 3: {
                int i = random.nextInt(n);
                sigma[i] = sigma[i] == 0.5 ? 0.25 : 0.5;
                break;
            }
            default:
                split = split == null ? new int[] { n } : null;
        }
        return SdrSource.of(vectors, sizes, mu, sigma, split);
    }
}
