/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.core.common.io.stream.Writeable;
import org.opensearch.test.AbstractWireSerializingTestCase;

/**
 * The source's wire format (how the coordinator hands a request's source to the shards) and its
 * equals/hashCode, by OpenSearch's serialization tests. Its validation is tested through the
 * requests that carry it (SdrRescorerBuilderTests, SdrCandidatesQueryBuilderTests).
 */
public class SdrSourceTests extends AbstractWireSerializingTestCase<SdrSource> {
    @Override
    protected SdrSource createTestInstance() {
        return TestSources.random(random(), randomBoolean(), randomBoolean());
    }

    @Override
    protected Writeable.Reader<SdrSource> instanceReader() {
        return SdrSource::new;
    }

    @Override
    protected SdrSource mutateInstance(SdrSource instance) {
        return TestSources.mutate(random(), instance, true, true);
    }
}
