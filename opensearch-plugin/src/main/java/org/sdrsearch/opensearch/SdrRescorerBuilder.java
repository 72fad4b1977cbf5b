/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.VectorEncoding;
import org.opensearch.common.lucene.search.Queries;
import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.common.ParsingException;
import org.opensearch.core.common.io.stream.StreamInput;
import org.opensearch.core.common.io.stream.StreamOutput;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.mapper.DocumentMapper;
import org.opensearch.index.mapper.MappedFieldType;
import org.opensearch.index.mapper.ObjectMapper;
import org.opensearch.index.query.QueryRewriteContext;
import org.opensearch.index.query.QueryShardContext;
import org.opensearch.search.rescore.RescoreContext;
import org.opensearch.search.rescore.RescorerBuilder;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The {@code sdr} rescore clause: exact SDR of the source given in the request against each hit
 * of the rescore window, computed on the shard from the hit's nested sentence vectors. The score
 * replaces the first-pass score. The request format is in README.md ("Request").
 */
public class SdrRescorerBuilder extends RescorerBuilder<SdrRescorerBuilder> {
    public static final String NAME = "sdr";
    public static final String DEFAULT_FIELD = "sentences.vector";

    static final String VECTORS = "vectors";
    static final String PARAGRAPH_SIZES = "paragraph_sizes";
    static final String MU = "mu";
    static final String SIGMA = "sigma";
    static final String PARTS = "parts";
    static final String EXPLAIN = "explain";
    static final String EXPLAIN_TOP = "explain_top";
    static final String EXPLAIN_SOURCE = "explain_source";
    /** The most {@code _source} fields {@code explain_source} may name. */
    static final int MAX_SOURCE_FIELDS = 64;
    static final String FIELD = "field";
    static final String PARAGRAPH_FIELD = "paragraph_field";
    static final String POSITION_FIELD = "position_field";

    private final SdrSource source;
    private final String field;
    private final String paragraphField;
    private final String positionField;
    private final boolean explain;
    private final int explainTop;
    private final String[] explainSource;

    /**
     * @param field          the nested knn_vector field (default {@code sentences.vector})
     * @param paragraphField its sibling integer field with the paragraph number (default {@code <path>.paragraph})
     * @param positionField  its sibling integer field with the sentence position (default {@code <path>.position})
     */
    public SdrRescorerBuilder(SdrSource source, String field, String paragraphField, String positionField, boolean explain) {
        this(source, field, paragraphField, positionField, explain, 0);
    }

    /**
     * @param explainTop with {@code explain} false: the breakdown of only the best {@code explainTop} hits of
     *                   the window (each shard's best; the coordinator's top {@code explainTop} are among them),
     *                   the hits a caller presents, in the same request as the scores of the whole window
     */
    public SdrRescorerBuilder(SdrSource source, String field, String paragraphField, String positionField, boolean explain,
                              int explainTop) {
        this(source, field, paragraphField, positionField, explain, explainTop, new String[0]);
    }

    /**
     * @param explainSource {@code _source} fields (none: no {@code _sdr_source}): each explained hit (explain, or
     *                      the best explain_top) also carries its {@code _source} filtered to them, the vector field
     *                      left out (a derived-source index rebuilds no vector for it), so a caller presents the hits
     *                      without reading them again
     */
    public SdrRescorerBuilder(SdrSource source, String field, String paragraphField, String positionField, boolean explain,
                              int explainTop, String[] explainSource) {
        this.explainSource = Objects.requireNonNull(explainSource, EXPLAIN_SOURCE).clone();
        if (this.explainSource.length > MAX_SOURCE_FIELDS) {
            throw new IllegalArgumentException("[" + EXPLAIN_SOURCE + "] names " + this.explainSource.length + " fields; at most "
                + MAX_SOURCE_FIELDS);
        }
        for (String f : this.explainSource) {
            if (f == null || f.isEmpty()) {
                throw new IllegalArgumentException("[" + EXPLAIN_SOURCE + "] must name fields: an empty name");
            }
        }
        if (this.explainSource.length > 0 && explain == false && explainTop == 0) {
            throw new IllegalArgumentException("[" + EXPLAIN_SOURCE + "] goes with [" + EXPLAIN + "] or [" + EXPLAIN_TOP
                + "]: it adds the source of the hits they explain");
        }
        if (explainTop < 0) {
            throw new IllegalArgumentException("[" + EXPLAIN_TOP + "] must be 0 or more, got " + explainTop);
        }
        this.explainTop = explainTop;
        this.source = Objects.requireNonNull(source, "source");
        this.field = field == null ? DEFAULT_FIELD : field;
        int dot = this.field.lastIndexOf('.');
        if (dot <= 0 || dot == this.field.length() - 1) {
            throw new IllegalArgumentException("[" + FIELD + "] must be a field of a nested object, as sentences.vector; got ["
                + this.field + "]");
        }
        String path = this.field.substring(0, dot);
        this.paragraphField = paragraphField == null ? path + ".paragraph" : paragraphField;
        this.positionField = positionField == null ? path + ".position" : positionField;
        this.explain = explain;
    }

    public SdrRescorerBuilder(StreamInput in) throws IOException {
        super(in);
        this.source = new SdrSource(in);
        this.field = in.readString();
        this.paragraphField = in.readString();
        this.positionField = in.readString();
        this.explain = in.readBoolean();
        this.explainTop = in.readVInt();
        this.explainSource = in.readStringArray();
    }

    @Override
    protected void doWriteTo(StreamOutput out) throws IOException {
        source.writeTo(out);
        out.writeString(field);
        out.writeString(paragraphField);
        out.writeString(positionField);
        out.writeBoolean(explain);
        out.writeVInt(explainTop);
        out.writeStringArray(explainSource);
    }

    @Override
    public String getWriteableName() {
        return NAME;
    }

    public SdrSource source() {
        return source;
    }

    public String field() {
        return field;
    }

    public String paragraphField() {
        return paragraphField;
    }

    public String positionField() {
        return positionField;
    }

    public boolean explain() {
        return explain;
    }

    /** How many of the best hits get their breakdown without {@code explain} (0: none). */
    public int explainTop() {
        return explainTop;
    }

    /** The {@code _source} fields an explained hit also carries ({@code _sdr_source}; none: not asked). */
    public String[] explainSource() {
        return explainSource.clone();
    }

    /** Whether some hit gets its breakdown ({@code _sdr}): every hit with explain, else the best explain_top. */
    boolean explainsAny() {
        return explain || explainTop > 0;
    }

    /** The nested object path of the vector field ({@code sentences}). */
    String nestedPath() {
        return field.substring(0, field.lastIndexOf('.'));
    }

    @Override
    public RescorerBuilder<SdrRescorerBuilder> rewrite(QueryRewriteContext ctx) {
        return this;
    }

    @Override
    protected void doXContent(XContentBuilder builder, Params params) throws IOException {
        builder.startObject(NAME);
        builder.field(VECTORS, source.vectorsBase64());
        builder.array(PARAGRAPH_SIZES, source.paragraphSizes());
        builder.array(MU, source.muArray());
        builder.array(SIGMA, source.sigmaArray());
        if (source.parts() != null) {
            builder.array(PARTS, source.parts());
        }
        builder.field(FIELD, field);
        builder.field(PARAGRAPH_FIELD, paragraphField);
        builder.field(POSITION_FIELD, positionField);
        builder.field(EXPLAIN, explain);
        builder.field(EXPLAIN_TOP, explainTop);
        if (explainSource.length > 0) {
            builder.array(EXPLAIN_SOURCE, explainSource);
        }
        builder.endObject();
    }

    // -- parsing ------------------------------------------------------------------------------------
    /**
     * Parses the body of {@code "sdr": {...}} (the parser is on its START_OBJECT). Bad input is a
     * {@link ParsingException} (HTTP 400) that names the field.
     */
    public static SdrRescorerBuilder fromXContent(XContentParser parser) throws IOException {
        XContentParser.Token token = parser.currentToken();
        if (token != XContentParser.Token.START_OBJECT) {
            throw new ParsingException(parser.getTokenLocation(), "[" + NAME + "] expected an object, got " + token);
        }
        try (SourceParser vectors = new SourceParser()) {
            int[] sizes = null;
            double[] mu = null;
            double[] sigma = null;
            int[] parts = null;
            boolean explain = false;
            int explainTop = 0;
            String[] explainSource = new String[0];
            String field = null;
            String paragraphField = null;
            String positionField = null;
            String name = null;
            while ((token = parser.nextToken()) != XContentParser.Token.END_OBJECT) {
                if (token == XContentParser.Token.FIELD_NAME) {
                    name = parser.currentName();
                    continue;
                }
                if (name == null) {
                    throw new ParsingException(parser.getTokenLocation(), "[" + NAME + "] unexpected " + token);
                }
                try {
                    switch (name) {
                        case VECTORS:
                            vectors.readVectors(parser);
                            break;
                        case PARAGRAPH_SIZES:
                            sizes = parseInts(parser, PARAGRAPH_SIZES);
                            break;
                        case MU:
                            mu = parseDoubles(parser, MU);
                            break;
                        case SIGMA:
                            sigma = parseDoubles(parser, SIGMA);
                            break;
                        case PARTS:
                            parts = parseInts(parser, PARTS);
                            break;
                        case EXPLAIN:
                            if (token != XContentParser.Token.VALUE_BOOLEAN) {
                                throw error(parser, "[" + EXPLAIN + "] must be true or false, got " + token);
                            }
                            explain = parser.booleanValue();
                            break;
                        case EXPLAIN_TOP:
                            if (token != XContentParser.Token.VALUE_NUMBER || parser.doubleValue() != Math.rint(parser.doubleValue())
                                || parser.doubleValue() < 0 || parser.doubleValue() > Integer.MAX_VALUE) {
                                throw error(parser, "[" + EXPLAIN_TOP + "] must be an integer of 0 or more, got "
                                    + (token == XContentParser.Token.VALUE_NUMBER ? parser.text() : token));
                            }
                            explainTop = parser.intValue();
                            break;
                        case EXPLAIN_SOURCE:
                            explainSource = parseStrings(parser, EXPLAIN_SOURCE);
                            break;
                        case FIELD:
                            field = parseString(parser, FIELD);
                            break;
                        case PARAGRAPH_FIELD:
                            paragraphField = parseString(parser, PARAGRAPH_FIELD);
                            break;
                        case POSITION_FIELD:
                            positionField = parseString(parser, POSITION_FIELD);
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
                    throw new IllegalArgumentException("[" + VECTORS + "] is required: the source's sentence vectors");
                }
                if (sizes == null) {
                    throw new IllegalArgumentException("[" + PARAGRAPH_SIZES + "] is required: the number of sentences of each "
                        + "source paragraph");
                }
                SdrSource source = SdrSource.of(vectors.rows(sentencesOf(sizes)), sizes, mu, sigma, parts);
                return new SdrRescorerBuilder(source, field, paragraphField, positionField, explain, explainTop, explainSource);
            } catch (IllegalArgumentException e) {
                throw error(parser, e.getMessage());
            }
        }
    }

    static final String KEYS = String.join(", ", VECTORS, PARAGRAPH_SIZES, MU, SIGMA, PARTS, EXPLAIN, EXPLAIN_TOP,
        EXPLAIN_SOURCE, FIELD, PARAGRAPH_FIELD, POSITION_FIELD);

    /** The number of sentences {@code sizes} add up to (negative sizes count 0: SdrSource refuses them by name). */
    static long sentencesOf(int[] sizes) {
        long total = 0;
        for (int size : sizes) {
            total += Math.max(size, 0);
        }
        return total;
    }

    static ParsingException error(XContentParser parser, String message) {
        return new ParsingException(parser.getTokenLocation(), "[" + NAME + "] " + message);
    }

    /** An array of at most {@link #MAX_SOURCE_FIELDS} strings. */
    static String[] parseStrings(XContentParser parser, String name) throws IOException {
        if (parser.currentToken() != XContentParser.Token.START_ARRAY) {
            throw new IllegalArgumentException("[" + name + "] must be an array of field names, got " + parser.currentToken());
        }
        List<String> out = new ArrayList<>();
        XContentParser.Token token;
        while ((token = parser.nextToken()) != XContentParser.Token.END_ARRAY) {
            if (token != XContentParser.Token.VALUE_STRING) {
                throw new IllegalArgumentException("[" + name + "] must be an array of field names, got " + token + " in it");
            }
            if (out.size() == MAX_SOURCE_FIELDS) {
                throw new IllegalArgumentException("[" + name + "] names more than " + MAX_SOURCE_FIELDS + " fields");
            }
            out.add(parser.text());
        }
        return out.toArray(new String[0]);
    }

    static String parseString(XContentParser parser, String name) throws IOException {
        if (parser.currentToken() != XContentParser.Token.VALUE_STRING) {
            throw new IllegalArgumentException("[" + name + "] must be a string, got " + parser.currentToken());
        }
        return parser.text();
    }

    /** Per-paragraph numbers (mu, sigma): at most one per source sentence. */
    static double[] parseDoubles(XContentParser parser, String name) throws IOException {
        if (parser.currentToken() != XContentParser.Token.START_ARRAY) {
            throw new IllegalArgumentException("[" + name + "] must be an array of numbers, got " + parser.currentToken());
        }
        return SourceParser.parseNumbers(parser, name, SdrLimits.maxSourceSentences(),
            n -> SdrLimits.checkSourceSentences(name, n));
    }

    /** Per-paragraph integers (paragraph_sizes, parts): at most one per source sentence. */
    static int[] parseInts(XContentParser parser, String name) throws IOException {
        if (parser.currentToken() != XContentParser.Token.START_ARRAY) {
            throw new IllegalArgumentException("[" + name + "] must be an array of integers, got " + parser.currentToken());
        }
        double[] values = parseDoubles(parser, name);
        int[] out = new int[values.length];
        for (int i = 0; i < values.length; i++) {
            if (values[i] != Math.rint(values[i]) || Math.abs(values[i]) > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("[" + name + "] value " + i + " must be an integer, got " + values[i]);
            }
            out[i] = (int) values[i];
        }
        return out;
    }

    // -- the shard side -----------------------------------------------------------------------------
    @Override
    protected RescoreContext innerBuildContext(int windowSize, QueryShardContext context) throws IOException {
        if (windowSize < 1) {
            throw new IllegalArgumentException("[" + NAME + "] window_size must be at least 1, got " + windowSize);
        }
        if (explain == false && explainTop > 0) {  // explain: the hits returned, known when the rescore runs (SdrRescorer)
            try {
                SdrLimits.checkExplainPairs(EXPLAIN_TOP, Math.min(windowSize, explainTop), source.sentences());
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("[" + NAME + "] " + e.getMessage(), e);
            }
        }
        checkMapping(context);
        return new SdrRescoreContext(windowSize, this, context.bitsetFilter(Queries.newNonNestedFilter()));
    }

    /** Integer field types whose doc values the candidate reader reads (SORTED_NUMERIC). */
    private static final java.util.Set<String> INTEGER_TYPES = java.util.Set.of("integer", "long", "short", "byte");

    /**
     * Refuses, as a 400, a request that cannot be scored against this index: the vector field is not
     * a knn_vector inside a nested object, it holds another dimension or non-float vectors, or the
     * paragraph or position field is missing, is not an integer field with doc values, or is not beside the
     * vector field in its nested object. Reads the index mapping (the k-NN plugin's own classes are not
     * visible to this plugin) and the segments' field infos.
     */
    private void checkMapping(QueryShardContext context) {
        checkVectorField(context, NAME, field, source.dim());
        checkSiblingField(context, PARAGRAPH_FIELD, paragraphField);
        checkSiblingField(context, POSITION_FIELD, positionField);
    }

    private void checkSiblingField(QueryShardContext context, String key, String name) {
        MappedFieldType type = context.fieldMapper(name);
        String what = "[" + NAME + "] [" + key + "] [" + name + "]";
        if (type == null) {
            throw new IllegalArgumentException(what + " is not in the mapping of index [" + context.index().getName() + "]");
        }
        if (INTEGER_TYPES.contains(type.typeName()) == false) {
            throw new IllegalArgumentException(what + " is of type [" + type.typeName() + "], not an integer field ("
                + String.join(", ", new java.util.TreeSet<>(INTEGER_TYPES)) + ")");
        }
        String path = nestedPath();
        if (name.startsWith(path + ".") == false) {
            throw new IllegalArgumentException(what + " must be a field of the nested object [" + path + "], beside [" + field
                + "]");
        }
        Map<String, Object> mapping = mappingOf(context, name);
        if (mapping != null && "false".equals(String.valueOf(mapping.get("doc_values")))) {
            throw new IllegalArgumentException(what + " has no doc values");
        }
    }

    /**
     * Refuses (as a 400 naming {@code who}) a vector field that is not a float knn_vector inside a
     * nested object, or that holds another dimension than {@code dim} (from the mapping and the
     * segments' field infos).
     */
    static void checkVectorField(QueryShardContext context, String who, String field, int dim) {
        MappedFieldType vectorType = context.fieldMapper(field);
        if (vectorType == null) {
            throw new IllegalArgumentException("[" + who + "] field [" + field + "] is not in the mapping of index ["
                + context.index().getName() + "]");
        }
        if ("knn_vector".equals(vectorType.typeName()) == false) {
            throw new IllegalArgumentException("[" + who + "] field [" + field + "] is of type [" + vectorType.typeName()
                + "], not knn_vector");
        }
        int dot = field.lastIndexOf('.');
        String nestedPath = dot > 0 ? field.substring(0, dot) : field;
        ObjectMapper nested = context.getObjectMapper(nestedPath);
        if (nested == null || nested.nested().isNested() == false) {
            throw new IllegalArgumentException("[" + who + "] field [" + field + "] must be inside a nested object; ["
                + nestedPath + "] is not nested");
        }
        Map<String, Object> vectorMapping = mappingOf(context, field);
        if (vectorMapping != null) {
            Object dimension = vectorMapping.get("dimension");
            if (dimension != null && String.valueOf(dimension).equals(String.valueOf(dim)) == false) {
                throw new IllegalArgumentException("[" + who + "] the source vectors have " + dim
                    + " dimensions but field [" + field + "] has " + dimension);
            }
            Object dataType = vectorMapping.get("data_type");
            if (dataType != null && "float".equals(String.valueOf(dataType)) == false) {
                throw new IllegalArgumentException("[" + who + "] field [" + field + "] holds " + dataType
                    + " vectors; only float vectors are supported");
            }
        }
        if (context.getIndexReader() != null) {
            for (LeafReaderContext leaf : context.getIndexReader().leaves()) {
                FieldInfo info = leaf.reader().getFieldInfos().fieldInfo(field);
                if (info == null || info.getVectorDimension() == 0) {
                    continue;
                }
                if (info.getVectorDimension() != dim) {
                    throw new IllegalArgumentException("[" + who + "] the source vectors have " + dim
                        + " dimensions but field [" + field + "] has " + info.getVectorDimension());
                }
                if (info.getVectorEncoding() != VectorEncoding.FLOAT32) {
                    throw new IllegalArgumentException("[" + who + "] field [" + field + "] holds " + info.getVectorEncoding()
                        + " vectors; only float vectors are supported");
                }
                break;
            }
        }
    }

    /** The mapping entry of a dotted field path ({@code sentences.vector}), or null where it cannot be read. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> mappingOf(QueryShardContext context, String path) {
        DocumentMapper mapper = context.getMapperService() == null ? null : context.getMapperService().documentMapper();
        if (mapper == null) {
            return null;
        }
        Map<String, Object> node = XContentHelper.convertToMap(JsonXContent.jsonXContent, mapper.mappingSource().string(), false);
        if (node.size() == 1 && node.containsKey("properties") == false) {
            Object only = node.values().iterator().next();  // {"_doc": {...}}
            if (only instanceof Map) {
                node = (Map<String, Object>) only;
            }
        }
        for (String part : path.split("\\.")) {
            Object properties = node.get("properties");
            if ((properties instanceof Map) == false) {
                return null;
            }
            Object child = ((Map<String, Object>) properties).get(part);
            if ((child instanceof Map) == false) {
                return null;
            }
            node = (Map<String, Object>) child;
        }
        return node;
    }

    @Override
    public boolean equals(Object obj) {
        if (super.equals(obj) == false) {
            return false;
        }
        SdrRescorerBuilder other = (SdrRescorerBuilder) obj;
        return source.equals(other.source)
            && field.equals(other.field)
            && paragraphField.equals(other.paragraphField)
            && positionField.equals(other.positionField)
            && explain == other.explain
            && explainTop == other.explainTop
            && Arrays.equals(explainSource, other.explainSource);
    }

    @Override
    public int hashCode() {
        return Objects.hash(super.hashCode(), source, field, paragraphField, positionField, explain, explainTop,
            Arrays.hashCode(explainSource));
    }
}
