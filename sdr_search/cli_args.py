"""Command-line arguments to settings: the helpers every command module shares (pure; no I/O
beyond opening the embedding cache)."""

from __future__ import annotations

__all__ = ["hybrid_spec_from_args", "encoder_settings", "segmentation_settings", "cache_from_args"]


def hybrid_spec_from_args(args, default=None):
    """The hybrid spec of ``--fusion``/``--weights``/``--rank-constant`` over ``default``
    (:data:`sdr_search.core.fusion.DEFAULT_HYBRID` when None)."""
    from sdr_search.core.fusion import DEFAULT_HYBRID, parse_weights

    base = default or DEFAULT_HYBRID
    weights = parse_weights(args.weights) if getattr(args, "weights", None) else None
    return base.replace(fusion=getattr(args, "fusion", None), weights=weights,
                        rank_constant=getattr(args, "rank_constant", None), feedback=getattr(args, "feedback", None))


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
