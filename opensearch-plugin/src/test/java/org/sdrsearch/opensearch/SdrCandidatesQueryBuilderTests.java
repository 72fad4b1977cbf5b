/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.opensearch.common.xcontent.XContentFactory;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.ParseField;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.NamedWriteableRegistry;
import org.opensearch.core.common.io.stream.Writeable;
import org.opensearch.core.xcontent.DeprecationHandler;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.ToXContent;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.query.AbstractQueryBuilder;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.index.query.TermQueryBuilder;
import org.opensearch.test.AbstractSerializingTestCase;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * The {@code sdr_candidates} query's wire format (with a filter query), its XContent and
 * equals/hashCode by OpenSearch's serialization tests; its defaults, and every bad input as a 400
 * naming the field. (Its search, on a Lucene index: SdrCandidatesQueryTests.)
 */
public class SdrCandidatesQueryBuilderTests extends AbstractSerializingTestCase<SdrCandidatesQueryBuilder> {
    private static final NamedXContentRegistry REGISTRY = new NamedXContentRegistry(List.of(
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(TermQueryBuilder.NAME), TermQueryBuilder::fromXContent),
        new NamedXContentRegistry.Entry(QueryBuilder.class, new ParseField(SdrCandidatesQueryBuilder.NAME),
            SdrCandidatesQueryBuilder::fromXContent)));
    private static final NamedWriteableRegistry WRITEABLES = new NamedWriteableRegistry(List.of(
        new NamedWriteableRegistry.Entry(QueryBuilder.class, TermQueryBuilder.NAME, TermQueryBuilder::new)));
    private static final String[] AGGREGATIONS = { "votes", "sum", "weighted-sum", "sdr-bound" };

    @Override
    protected NamedXContentRegistry xContentRegistry() {
        return REGISTRY;
    }

    @Override
    protected NamedWriteableRegistry getNamedWriteableRegistry() {
        return WRITEABLES;
    }

    /** The fields of a query, to build one and to change one of them. */
    private static final class Fields {
        SdrSource source;
        boolean statistics;
        int k;
        int efSearch;
        String aggregation;
        QueryBuilder filter;
        List<String> exclude;
        String idField;
        String field;
        String search;
        int oversample;
        float boost;
        String queryName;

        SdrCandidatesQueryBuilder build() {
            SdrCandidatesQueryBuilder built = new SdrCandidatesQueryBuilder(source, statistics, k, efSearch, aggregation, filter,
                exclude, idField, field, search, oversample);
            built.boost(boost);
            return queryName == null ? built : built.queryName(queryName);
        }
    }

    @Override
    protected SdrCandidatesQueryBuilder createTestInstance() {
        Fields f = new Fields();
        f.statistics = randomBoolean();
        f.source = TestSources.random(random(), f.statistics, false);  // without statistics: mu 0, sigma 1, as parsed
        f.k = randomIntBetween(1, 100);
        f.efSearch = randomIntBetween(1, 200);
        f.aggregation = randomFrom(AGGREGATIONS);
        f.filter = randomBoolean() ? null : randomFilter();
        f.exclude = randomList(3, () -> randomAlphaOfLength(4));
        f.idField = randomBoolean() ? null : randomAlphaOfLengthBetween(1, 8);
        f.field = randomBoolean() ? null : randomField();
        f.search = randomFrom("documents", "sentences");
        f.oversample = randomIntBetween(1, 10);
        f.boost = randomBoolean() ? AbstractQueryBuilder.DEFAULT_BOOST : randomFloat() * 10;
        f.queryName = randomBoolean() ? null : randomAlphaOfLengthBetween(1, 8);
        return f.build();
    }

    private static QueryBuilder randomFilter() {
        return new TermQueryBuilder(randomAlphaOfLengthBetween(1, 8), randomAlphaOfLengthBetween(1, 8));
    }

    private static String randomField() {
        return randomAlphaOfLengthBetween(1, 8) + "." + randomAlphaOfLengthBetween(1, 8);
    }

    @Override
    protected SdrCandidatesQueryBuilder mutateInstance(SdrCandidatesQueryBuilder q) {
        Fields f = new Fields();
        f.source = q.source();
        f.statistics = q.statistics();
        f.k = q.k();
        f.efSearch = q.efSearch();
        f.aggregation = q.aggregation();
        f.filter = q.filter();
        f.exclude = q.exclude();
        f.idField = q.idField();
        f.field = q.field();
        f.search = q.search();
        f.oversample = q.oversample();
        f.boost = q.boost();
        f.queryName = q.queryName();
        switch (randomIntBetween(0, 12)) {
            case 0: f.source = TestSources.mutate(random(), f.source, f.statistics, false); break;
            case 1: f.statistics = f.statistics == false; break;
            case 2: f.k = randomValueOtherThan(f.k, () -> randomIntBetween(1, 100)); break;
            case 3: f.efSearch = randomValueOtherThan(f.efSearch, () -> randomIntBetween(1, 200)); break;
            case 4: f.aggregation = randomValueOtherThan(f.aggregation, () -> randomFrom(AGGREGATIONS)); break;
            case 5: f.filter = f.filter == null || randomBoolean() ? randomValueOtherThan(f.filter,
                SdrCandidatesQueryBuilderTests::randomFilter) : null; break;
            case 6: f.exclude = new ArrayList<>(f.exclude); f.exclude.add(randomAlphaOfLength(5)); break;
            case 7: f.idField = randomValueOtherThan(f.idField, () -> randomAlphaOfLengthBetween(1, 8)); break;
            case 8: f.field = randomValueOtherThan(f.field, SdrCandidatesQueryBuilderTests::randomField); break;
            case 9: f.search = f.search.equals("documents") ? "sentences" : "documents"; break;
            case 10: f.oversample = randomValueOtherThan(f.oversample, () -> randomIntBetween(1, 10)); break;
            case 11: f.boost = randomValueOtherThan(f.boost, () -> randomFloat() * 10); break;
            default: f.queryName = randomValueOtherThan(f.queryName, () -> randomBoolean() ? null : randomAlphaOfLengthBetween(1, 8));
        }
        return f.build();
    }

    @Override
    protected Writeable.Reader<SdrCandidatesQueryBuilder> instanceReader() {
        return SdrCandidatesQueryBuilder::new;
    }

    /** The query as a search body holds it: {"sdr_candidates": {...}}, through OpenSearch's query parser. */
    @Override
    protected SdrCandidatesQueryBuilder doParseInstance(XContentParser parser) throws IOException {
        assertEquals(XContentParser.Token.START_OBJECT, parser.nextToken());
        QueryBuilder parsed = AbstractQueryBuilder.parseInnerQueryBuilder(parser);
        assertTrue(parsed instanceof SdrCandidatesQueryBuilder);
        return (SdrCandidatesQueryBuilder) parsed;
    }

    private static SdrCandidatesQueryBuilder parse(String body) throws IOException {
        try (XContentParser p = JsonXContent.jsonXContent.createParser(REGISTRY, DeprecationHandler.THROW_UNSUPPORTED_OPERATION, body)) {
            p.nextToken();
            return SdrCandidatesQueryBuilder.fromXContent(p);
        }
    }

    private static final String VECTORS = "\"vectors\": \"" + TestSources.b64(1, 0, 0, 1, 0.6f, 0.8f) + "\"";

    public void testDefaultsAndEveryKey() throws IOException {
        SdrCandidatesQueryBuilder plain = parse("{" + VECTORS + ", \"paragraph_sizes\": [2, 1]}");
        XContentBuilder x = XContentFactory.jsonBuilder();
        plain.toXContent(x, ToXContent.EMPTY_PARAMS);
        String json = x.toString();
        assertTrue(json, json.contains("\"k\":30") && json.contains("\"ef_search\":100") && json.contains("\"weighted-sum\""));
        assertFalse(json, json.contains("\"mu\""));
        assertFalse(plain.statistics());
        assertEquals("documents", plain.search());
        assertEquals(4, plain.oversample());
        assertEquals("doc_id", plain.idField());
        assertEquals("sentences.vector", plain.field());
        SdrCandidatesQueryBuilder full = parse("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0.1, 0.2], "
            + "\"sigma\": [0.5, 1e-9], \"k\": 7, \"ef_search\": 50, \"aggregation\": \"sdr-bound\", "
            + "\"filter\": {\"term\": {\"metadata.court\": \"x\"}}, \"exclude\": [\"a\", \"b\"], \"_name\": \"c\", \"search\": \"sentences\", \"oversample\": 3}");
        assertEquals(3, full.source().sentences());
        assertTrue(full.statistics());
        assertEquals(7, full.k());
        assertEquals(50, full.efSearch());
        assertEquals("sdr-bound", full.aggregation());
        assertTrue(full.filter() instanceof TermQueryBuilder);
        assertEquals(List.of("a", "b"), full.exclude());
        assertEquals("c", full.queryName());
        assertEquals("sentences", full.search());
        assertEquals(3, full.oversample());
    }

    private void assertBad(String body, String expected) {
        ParsingException e = expectThrows(ParsingException.class, () -> parse(body));
        assertTrue(e.getMessage(), e.getMessage().contains(expected));
        assertTrue(e.getMessage(), e.getMessage().startsWith("[sdr"));
    }

    public void testBadInputNamesTheField() {
        assertBad("{\"paragraph_sizes\": [1]}", "[vectors] is required");
        assertBad("{" + VECTORS + "}", "[paragraph_sizes] is required");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0, 0]}", "[mu] and [sigma] go together");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"k\": 0}", "[k] must be between 1 and 10000");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"k\": 1.5}", "[k] must be an integer");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"aggregation\": \"max\"}", "[aggregation] must be one of");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 2]}", "not a whole number of rows");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"nope\": 1}", "does not support [nope]");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"search\": \"paragraphs\"}", "[search] must be documents or sentences");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"oversample\": 0}", "[oversample] must be at least 1");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"filter\": 3}", "[filter] must be a query object");
        assertBad("{" + VECTORS + ", \"paragraph_sizes\": [2, 1], \"mu\": [0, 0], \"sigma\": [1, -1]}", "[sigma] value 1 is negative");
    }
}
