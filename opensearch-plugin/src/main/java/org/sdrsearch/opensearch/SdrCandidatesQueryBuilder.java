/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.join.BitSetProducer;
import org.apache.lucene.search.join.ToChildBlockJoinQuery;
import org.opensearch.common.lucene.search.Queries;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.mapper.MappedFieldType;
import org.opensearch.index.query.AbstractQueryBuilder;
import org.opensearch.index.query.QueryBuilder;
import org.opensearch.index.query.QueryRewriteContext;
import org.opensearch.index.query.QueryShardContext;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * The {@code sdr_candidates} query: SDR's candidate stage on each shard in one request (README.md,
 * "Candidates"). Per source sentence a nested k-NN search of {@code k} documents (HNSW,
 * {@code ef_search}), optionally restricted to the documents a {@code filter} matches and without the
 * {@code exclude} ids, aggregated per document ({@code aggregation}); the documents seen match, scored
 * by the aggregate.
 */
public class SdrCandidatesQueryBuilder extends AbstractQueryBuilder<SdrCandidatesQueryBuilder> {
    public static final String NAME = "sdr_candidates";
    static final int MAX_K = 10_000;

    private final SdrSource source;
    private final boolean statistics;
    private final int k;
    private final int efSearch;
    private final String aggregation;
    private final QueryBuilder filter;
    private final List<String> exclude;
    private final String idField;
    private final String field;
    private final String search;      // "documents" (nested k-NN, default) or "sentences"
    private final int oversample;     // sentence hits per wanted document in "sentences" mode

    public SdrCandidatesQueryBuilder(SdrSource source, boolean statistics, int k, int efSearch, String aggregation,
                                     QueryBuilder filter, List<String> exclude, String idField, String field) {
        this(source, statistics, k, efSearch, aggregation, filter, exclude, idField, field, "documents", 4);
    }

    public SdrCandidatesQueryBuilder(SdrSource source, boolean statistics, int k, int efSearch, String aggregation,
                                     QueryBuilder filter, List<String> exclude, String idField, String field, String search,
                                     int oversample) {
        this.source = Objects.requireNonNull(source, "source");
        this.statistics = statistics;
        if (k < 1 || k > MAX_K) {
            throw new IllegalArgumentException("[k] must be between 1 and " + MAX_K + ", got " + k);
        }
        if (efSearch < 1 || efSearch > MAX_K) {
            throw new IllegalArgumentException("[ef_search] must be between 1 and " + MAX_K + ", got " + efSearch);
        }
        CandidateAggregator.Method.of(aggregation);
        this.k = k;
        this.efSearch = efSearch;
        this.aggregation = aggregation;
        this.filter = filter;
        this.exclude = exclude == null ? List.of() : List.copyOf(exclude);
        this.idField = idField == null ? "doc_id" : idField;
        this.field = field == null ? SdrRescorerBuilder.DEFAULT_FIELD : field;
        int dot = this.field.lastIndexOf('.');
        if (dot <= 0 || dot == this.field.length() - 1) {
            throw new IllegalArgumentException("[field] must be a field of a nested object, as sentences.vector; got [" + this.field + "]");
        }
        this.search = search == null ? "documents" : search;
        if (this.search.equals("documents") == false && this.search.equals("sentences") == false) {
            throw new IllegalArgumentException("[search] must be documents or sentences, got [" + this.search + "]");
        }
        if (oversample < 1) {
            throw new IllegalArgumentException("[oversample] must be at least 1, got " + oversample);
        }
        if (this.search.equals("sentences") && (long) oversample * k > MAX_K) {  // documents mode does not use it
            throw new IllegalArgumentException("[oversample] x [k] must be at most " + MAX_K + " in [search] sentences, got "
                + oversample + " x " + k);
        }
        checkWork(source.sentences(), k, efSearch, this.search, oversample);
        this.oversample = oversample;
    }

    public SdrCandidatesQueryBuilder(StreamInput in) throws IOException {
        super(in);
        this.source = new SdrSource(in);
        this.statistics = in.readBoolean();
        this.k = in.readVInt();
        this.efSearch = in.readVInt();
        this.aggregation = in.readString();
        this.filter = in.readOptionalNamedWriteable(QueryBuilder.class);
        this.exclude = in.readStringList();
        this.idField = in.readString();
        this.field = in.readString();
        this.search = in.readString();
        this.oversample = in.readVInt();
    }

    @Override
    protected void doWriteTo(StreamOutput out) throws IOException {
        source.writeTo(out);
        out.writeBoolean(statistics);
        out.writeVInt(k);
        out.writeVInt(efSearch);
        out.writeString(aggregation);
        out.writeOptionalNamedWriteable(filter);
        out.writeStringCollection(exclude);
        out.writeString(idField);
        out.writeString(field);
        out.writeString(search);
        out.writeVInt(oversample);
    }

    @Override
    public String getWriteableName() {
        return NAME;
    }

    SdrSource source() {
        return source;
    }

    QueryBuilder filter() {
        return filter;
    }

    boolean statistics() {
        return statistics;
    }

    int k() {
        return k;
    }

    int efSearch() {
        return efSearch;
    }

    String aggregation() {
        return aggregation;
    }

    List<String> exclude() {
        return exclude;
    }

    String idField() {
        return idField;
    }

    String field() {
        return field;
    }

    String search() {
        return search;
    }

    int oversample() {
        return oversample;
    }

    @Override
    protected void doXContent(XContentBuilder builder, Params params) throws IOException {
        builder.startObject(NAME);
        builder.field("vectors", source.vectorsBase64());
        builder.array("paragraph_sizes", source.paragraphSizes());
        if (statistics) {
            builder.array("mu", source.muArray());
            builder.array("sigma", source.sigmaArray());
        }
        builder.field("k", k);
        builder.field("ef_search", efSearch);
        builder.field("aggregation", aggregation);
        if (filter != null) {
            builder.field("filter", filter);
        }
        if (exclude.isEmpty() == false) {
            builder.array("exclude", exclude.toArray(new String[0]));
        }
        builder.field("id_field", idField);
        builder.field("field", field);
        builder.field("search", search);
        builder.field("oversample", oversample);
        printBoostAndQueryName(builder);
        builder.endObject();
    }

    public static SdrCandidatesQueryBuilder fromXContent(XContentParser parser) throws IOException {
        try (SourceParser vectors = new SourceParser()) {
            int[] sizes = null;
            double[] mu = null;
            double[] sigma = null;
            int k = 30;
            int efSearch = 100;
            String aggregation = "weighted-sum";
            QueryBuilder filter = null;
            List<String> exclude = new ArrayList<>();
            String idField = null;
            String field = null;
            String search = "documents";
            int oversample = 4;
            float boost = DEFAULT_BOOST;
            String queryName = null;
            String name = null;
            XContentParser.Token token;
            while ((token = parser.nextToken()) != XContentParser.Token.END_OBJECT) {
                if (token == XContentParser.Token.FIELD_NAME) {
                    name = parser.currentName();
                    continue;
                }
                if (name == null) {
                    throw error(parser, "unexpected " + token);
                }
                try {
                    switch (name) {
                        case "vectors":
                            vectors.readVectors(parser);
                            break;
                        case "paragraph_sizes":
                            sizes = SdrRescorerBuilder.parseInts(parser, name);
                            break;
                        case "mu":
                            mu = SdrRescorerBuilder.parseDoubles(parser, name);
                            break;
                        case "sigma":
                            sigma = SdrRescorerBuilder.parseDoubles(parser, name);
                            break;
                        case "k":
                            k = intValue(parser, name, token);
                            break;
                        case "ef_search":
                            efSearch = intValue(parser, name, token);
                            break;
                        case "aggregation":
                            aggregation = SdrRescorerBuilder.parseString(parser, name);
                            break;
                        case "filter":
                            if (token != XContentParser.Token.START_OBJECT) {
                                throw error(parser, "[filter] must be a query object, got " + token);
                            }
                            filter = parseInnerQueryBuilder(parser);
                            break;
                        case "exclude":
                            if (token != XContentParser.Token.START_ARRAY) {
                                throw error(parser, "[exclude] must be an array of document ids, got " + token);
                            }
                            while ((token = parser.nextToken()) != XContentParser.Token.END_ARRAY) {
                                if (token != XContentParser.Token.VALUE_STRING && token != XContentParser.Token.VALUE_NUMBER) {
                                    throw error(parser, "[exclude] value " + exclude.size() + " must be a string, got " + token);
                                }
                                exclude.add(parser.text());
                            }
                            break;
                        case "id_field":
                            idField = SdrRescorerBuilder.parseString(parser, name);
                            break;
                        case "field":
                            field = SdrRescorerBuilder.parseString(parser, name);
                            break;
                        case "search":
                            search = SdrRescorerBuilder.parseString(parser, name);
                            break;
                        case "oversample":
                            oversample = intValue(parser, name, token);
                            break;
                        case "boost":
                            boost = boostValue(parser, token);
                            break;
                        case "_name":
                            queryName = SdrRescorerBuilder.parseString(parser, name);
                            break;
                        default:
                            throw error(parser, "does not support [" + name + "]: its keys are " + KEYS);
                    }
                } catch (IllegalArgumentException e) {
                    throw error(parser, e.getMessage());
                }
            }
            try {
                if (vectors.hasVectors() == false) {
                    throw new IllegalArgumentException("[vectors] is required: the source's sentence vectors");
                }
                if (sizes == null) {
                    throw new IllegalArgumentException("[paragraph_sizes] is required: the number of sentences of each source "
                        + "paragraph");
                }
                if ((mu == null) != (sigma == null)) {
                    throw new IllegalArgumentException("[mu] and [sigma] go together: give both (the source paragraphs' corpus "
                        + "statistics) or neither");
                }
                long sentences = SdrRescorerBuilder.sentencesOf(sizes);
                // the candidate hits bound the work before the rows are built: they do not depend on the dimension
                checkWork(sentences, k, efSearch, search, oversample);
                float[][] rows = vectors.rows(sentences);
                boolean statistics = mu != null;
                if (statistics == false) {
                    mu = new double[sizes.length];
                    sigma = new double[sizes.length];
                    Arrays.fill(sigma, 1.0);
                }
                SdrSource source = SdrSource.of(rows, sizes, mu, sigma, null);
                SdrCandidatesQueryBuilder built = new SdrCandidatesQueryBuilder(source, statistics, k, efSearch, aggregation,
                    filter, exclude, idField, field, search, oversample);
                built.boost(boost);
                if (queryName != null) {
                    built.queryName(queryName);
                }
                return built;
            } catch (IllegalArgumentException e) {
                throw error(parser, e.getMessage());
            }
        }
    }

    static final String KEYS = "vectors, paragraph_sizes, mu, sigma, k, ef_search, aggregation, filter, exclude, id_field, "
        + "field, search, oversample, boost, _name";

    /** Hits each source sentence's search collects: max(k, ef_search) documents, or max(k x oversample, ef_search) sentences. */
    static long hitsPerSentence(int k, int efSearch, String search, int oversample) {
        return "sentences".equals(search) ? Math.max((long) k * oversample, efSearch) : Math.max(k, efSearch);
    }

    /** Refuses (IllegalArgumentException) a request whose candidate hits pass {@code sdr.limits.max_candidate_hits}. */
    static void checkWork(long sentences, int k, int efSearch, String search, int oversample) {
        if (k < 1 || efSearch < 1 || oversample < 1) {
            return;  // refused by name in the constructor
        }
        String which = "sentences".equals(search) ? "max(k x oversample, ef_search)" : "max(k, ef_search)";
        SdrLimits.checkCandidateHits(sentences, hitsPerSentence(k, efSearch, search, oversample), which);
    }

    /** {@code boost}: a number (or a string holding one, as OpenSearch's own queries take it). */
    private static float boostValue(XContentParser parser, XContentParser.Token token) throws IOException {
        if (token != XContentParser.Token.VALUE_NUMBER && token != XContentParser.Token.VALUE_STRING) {
            throw new IllegalArgumentException("[boost] must be a number, got " + token);
        }
        float boost;
        try {
            boost = parser.floatValue();
        } catch (IllegalArgumentException e) {  // NumberFormatException: a string that is no number
            throw new IllegalArgumentException("[boost] must be a number, got [" + parser.text() + "]");
        }
        if (Float.isFinite(boost) == false || boost < 0) {
            throw new IllegalArgumentException("[boost] must be a finite number of 0 or more, got " + boost);
        }
        return boost;
    }

    private static ParsingException error(XContentParser parser, String message) {
        return new ParsingException(parser.getTokenLocation(), "[" + NAME + "] " + message);
    }

    private static int intValue(XContentParser parser, String name, XContentParser.Token token) throws IOException {
        if (token != XContentParser.Token.VALUE_NUMBER) {
            throw new IllegalArgumentException("[" + name + "] must be an integer, got " + token);
        }
        double value = parser.doubleValue();
        if (value != Math.rint(value) || Math.abs(value) > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("[" + name + "] must be an integer, got " + value);
        }
        return (int) value;
    }

    @Override
    protected QueryBuilder doRewrite(QueryRewriteContext context) throws IOException {
        if (filter == null) {
            return this;
        }
        QueryBuilder rewritten = filter.rewrite(context);
        if (rewritten == filter) {
            return this;
        }
        SdrCandidatesQueryBuilder copy = new SdrCandidatesQueryBuilder(source, statistics, k, efSearch, aggregation, rewritten,
            exclude, idField, field, search, oversample);
        copy.boost(boost());
        copy.queryName(queryName());
        return copy;
    }

    @Override
    protected Query doToQuery(QueryShardContext context) throws IOException {
        SdrRescorerBuilder.checkVectorField(context, NAME, field, source.dim());
        BitSetProducer parents = context.bitsetFilter(Queries.newNonNestedFilter());
        Query excluded = null;
        if (exclude.isEmpty() == false) {
            MappedFieldType idType = context.fieldMapper(idField);
            if (idType == null) {
                throw new IllegalArgumentException("[" + NAME + "] id field [" + idField + "] is not in the mapping");
            }
            excluded = idType.termsQuery(new ArrayList<>(exclude), context);
        }
        Query childFilter = null;
        if (filter != null) {
            BooleanQuery.Builder parentFilter = new BooleanQuery.Builder();
            parentFilter.add(filter.toQuery(context), BooleanClause.Occur.FILTER);
            parentFilter.add(Queries.newNonNestedFilter(), BooleanClause.Occur.FILTER);
            if (excluded != null) {
                parentFilter.add(excluded, BooleanClause.Occur.MUST_NOT);
                excluded = null;  // inside the k-NN's own filter: k is not raised for it
            }
            childFilter = new ToChildBlockJoinQuery(parentFilter.build(), parents);
        }
        return new SdrCandidatesQuery(field, source, statistics, k, efSearch, CandidateAggregator.Method.of(aggregation),
            childFilter, excluded, exclude.size(), parents, search.equals("sentences") ? oversample : 0);
    }

    @Override
    protected boolean doEquals(SdrCandidatesQueryBuilder other) {
        return source.equals(other.source) && statistics == other.statistics && k == other.k && efSearch == other.efSearch
            && aggregation.equals(other.aggregation) && Objects.equals(filter, other.filter) && exclude.equals(other.exclude)
            && idField.equals(other.idField) && field.equals(other.field) && search.equals(other.search)
            && oversample == other.oversample;
    }

    @Override
    protected int doHashCode() {
        return Objects.hash(source, statistics, k, efSearch, aggregation, filter, exclude, idField, field, search, oversample);
    }
}
