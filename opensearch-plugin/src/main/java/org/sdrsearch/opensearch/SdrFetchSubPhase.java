/*
 * SPDX-License-Identifier: Apache-2.0
 */
package org.sdrsearch.opensearch;

import org.apache.lucene.index.LeafReaderContext;
import org.opensearch.common.document.DocumentField;
import org.opensearch.search.fetch.FetchContext;
import org.opensearch.search.fetch.FetchSubPhase;
import org.opensearch.search.fetch.FetchSubPhaseProcessor;
import org.opensearch.search.rescore.RescoreContext;

import java.io.IOException;
import java.util.Collections;

/**
 * With {@code "explain": true} in the {@code sdr} clause, adds to every returned hit the field
 * {@code _sdr}: its SDR score and, per source paragraph, the best candidate paragraph with P_ij,
 * N_ij and the best sentence pairs (README.md, "Response"). Reads the hit's sentences again, in
 * the fetch phase (which visits hits in doc-id order), so it costs one more read of the returned
 * hits only.
 */
final class SdrFetchSubPhase implements FetchSubPhase {
    static final String FIELD = "_sdr";

    @Override
    public FetchSubPhaseProcessor getProcessor(FetchContext fetchContext) {
        SdrRescoreContext found = null;
        if (fetchContext.rescore() != null) {
            for (RescoreContext rescore : fetchContext.rescore()) {
                if (rescore instanceof SdrRescoreContext && ((SdrRescoreContext) rescore).request().explain()) {
                    found = (SdrRescoreContext) rescore;  // the last sdr clause that asks for it
                }
            }
        }
        if (found == null) {
            return null;
        }
        SdrRescoreContext context = found;
        return new FetchSubPhaseProcessor() {
            private CandidateReader reader;
            private final CandidateSentences candidate = new CandidateSentences(context.request().source().dim());
            private final SdrScorer scorer = new SdrScorer(context.request().source());
            private LeafReaderContext leaf;
            private int last = -1;

            @Override
            public void setNextReader(LeafReaderContext readerContext) throws IOException {
                leaf = readerContext;
                reader = context.reader(readerContext);
                last = -1;
            }

            @Override
            public void process(HitContext hitContext) throws IOException {
                int doc = hitContext.docId();
                if (doc <= last) {  // not in doc-id order: start this segment's iterators again
                    reader = context.reader(leaf);
                }
                last = doc;
                reader.read(doc, candidate);
                hitContext.hit().setDocumentField(FIELD,
                    new DocumentField(FIELD, Collections.singletonList(scorer.explain(candidate))));
            }
        };
    }
}
