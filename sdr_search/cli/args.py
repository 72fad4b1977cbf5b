"""Command-line arguments to settings, stores and encoders: the helpers every command module
shares (no I/O beyond opening the embedding cache, the store and the model the flags name)."""

from __future__ import annotations

__all__ = [
    "hybrid_spec_from_args", "fusion_args", "encoder_settings", "segmentation_settings", "cache_from_args",
    "open_store", "store_label", "index_name", "encoder_for_store",
]


def hybrid_spec_from_args(args, default=None):
    """The hybrid spec of ``--fusion``/``--weights``/``--rank-constant`` over ``default``
    (:data:`sdr_search.core.fusion.DEFAULT_HYBRID` when None)."""
    from sdr_search.core.fusion import DEFAULT_HYBRID, parse_weights

    base = default or DEFAULT_HYBRID
    weights = parse_weights(args.weights) if getattr(args, "weights", None) else None
    return base.replace(fusion=getattr(args, "fusion", None), weights=weights,
                        rank_constant=getattr(args, "rank_constant", None), feedback=getattr(args, "feedback", None))


def fusion_args(args) -> dict:
    """``method``/``fusion``/``weights``/``rank_constant``/``feedback`` given on the command line (for
    :meth:`sdr_search.reranker.engine.MoreLikeThis.resolve`); absent ones are left to the defaults."""
    from sdr_search.core.fusion import parse_weights

    out: dict = {}
    if getattr(args, "method", None):
        out["method"] = args.method
    if getattr(args, "fusion", None):
        out["fusion"] = args.fusion
    if getattr(args, "weights", None):
        out["weights"] = parse_weights(args.weights)
    if getattr(args, "rank_constant", None) is not None:
        out["rank_constant"] = args.rank_constant
    if getattr(args, "feedback", None) is not None:
        out["feedback"] = args.feedback
    return out


def encoder_settings(args):
    from sdr_search.core.settings import EncoderSettings

    overrides = {k: v for k, v in {
        "model": args.model, "max_tokens": args.max_tokens, "precision": args.precision, "device": args.device,
    }.items() if v is not None}
    return EncoderSettings(**overrides)


def segmentation_settings(args):
    from sdr_search.core.settings import SegmentationSettings

    overrides = {k: getattr(args, k, None) for k in ("paragraph_unit", "min_paragraph_sentences", "min_sentence_chars")}
    return SegmentationSettings(**{k: v for k, v in overrides.items() if v is not None})


def cache_from_args(args):
    from sdr_search.core.cache import EmbeddingCache
    from sdr_search.core.settings import CacheSettings

    settings = CacheSettings(**({"cache_dir": args.cache_dir} if args.cache_dir else {}))
    if args.no_cache or settings.no_cache:
        return None
    return EmbeddingCache(settings.cache_dir / "embeddings.sqlite")


def open_store(args, *, create: bool = False):
    """The store named on the command line: ``--store DIR`` (embedded) or ``--opensearch URL``
    (:func:`sdr_search.api.open_store`)."""
    from sdr_search.api import open_store as open_target

    if getattr(args, "opensearch", None):
        return open_target(args.opensearch, index=args.index)
    return open_target(args.store, create=create)


def store_label(args) -> str:
    return f"{args.opensearch}/{args.index or 'default index'}" if getattr(args, "opensearch", None) else str(args.store)


def index_name(args) -> str:
    """The index name a result reports: the OpenSearch index or alias, ``default`` for an embedded
    store (as ``sdr serve`` names it)."""
    if getattr(args, "opensearch", None):
        from sdr_search.indexer.opensearch import OpenSearchSettings

        return args.index or OpenSearchSettings().index
    return "default"


def encoder_for_store(args, store):
    """The query encoder: --model / SDR_MODEL when given, else the model the store was built with
    (:func:`sdr_search.reranker.sources.query_encoder`)."""
    from sdr_search.reranker.sources import query_encoder

    return query_encoder(store.meta(), encoder_settings(args))
