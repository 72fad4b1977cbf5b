"""Where ``sdr reindex`` writes and how its batches travel: the plan (a new ``<live>-<timestamp>``
target beside the live name, or the unfinished one to resume, :func:`plan_reindex`), the dispatcher
(a Celery queue, or this process without a broker, :func:`dispatcher_for`), and the new embedded
store's FAISS index built once at the end (:func:`finalise_embedded`), or the new OpenSearch index merged to
few segments (:func:`finalise_opensearch`). The switch itself is in
:mod:`.swap`, the job in :mod:`.reindex`."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sdr_search.core.errors import InvalidInputError, StoreError

from .stores import embedded_spec, open_store_spec, opensearch_spec
from .swap import ReindexState, embedded_state_path, opensearch_state_path, timestamped_name

__all__ = ["ReindexPlan", "plan_reindex", "dispatcher_for", "finalise_embedded", "finalise_opensearch"]

logger = logging.getLogger("sdr")


@dataclass
class ReindexPlan:
    """Where a reindex writes (``target``, as a store ``spec``) and which live name it switches."""

    kind: str  # "embedded" | "opensearch"
    live: str  # link path or alias
    target: str  # directory or concrete index
    spec: dict[str, str]
    state_path: Path
    resumed: bool


def plan_reindex(inputs: list[str], *, store: str | os.PathLike[str] | None = None, opensearch: str | None = None,
                 index: str | None = None, restart: bool = False) -> tuple[ReindexPlan, ReindexState]:
    """The reindex of the embedded store at ``store`` (a symbolic link, or a directory to replace)
    or of the OpenSearch alias ``index`` at ``opensearch``: the unfinished one recorded in the state
    file, resumed, unless ``restart`` or it no longer applies; else a new ``<live>-<timestamp>``
    target. ``inputs``: the absolute input paths (recorded; a resume with others is warned about)."""
    if store is not None:
        link = Path(os.path.abspath(store))
        state_path = embedded_state_path(link)
        kind, live = "embedded", str(link)
    else:
        from sdr_search.indexer.opensearch.settings import OpenSearchSettings
        from sdr_search.core.settings import CacheSettings

        alias = index or OpenSearchSettings().index
        state_path = opensearch_state_path(CacheSettings().cache_dir, opensearch, alias)
        kind, live = "opensearch", alias
    state = None if restart else ReindexState.load(state_path)
    if restart and state_path.exists():
        logger.warning("--restart: ignoring the unfinished reindex recorded in %s", state_path)
    if state is not None and (state.kind != kind or state.live != live):
        raise InvalidInputError(f"{state_path} belongs to another reindex ({state.kind} {state.live}); delete it or use --restart")
    if state is not None and kind == "embedded" and not Path(state.target).is_dir():
        logger.warning("the unfinished reindex target %s is gone; starting a new one", state.target)
        state = None
    if state is not None and _is_live(kind, live, state.target, opensearch):
        # The previous run switched and died before removing its state file: never write into the
        # live index; start a new one.
        logger.info("%s already serves %s (the previous reindex finished); starting a new one", live, state.target)
        state = None
    if state is not None:
        if sorted(state.inputs) != sorted(inputs):
            logger.warning("resuming %s with different inputs than it started with (%s)", state.target, state.inputs)
        logger.info("resuming the unfinished reindex into %s (started %s)", state.target, state.started_at)
        target = state.target
    elif kind == "embedded":
        parent = Path(live).parent
        target = str(parent / _unused_name(Path(live).name, lambda n: os.path.lexists(parent / n)))
    else:
        target = _unused_name(live, lambda n: _opensearch_index_exists(opensearch, n))
    spec = embedded_spec(target) if kind == "embedded" else opensearch_spec(opensearch, target)
    resumed = state is not None
    if state is None:
        state = ReindexState(target=target, live=live, kind=kind,
                             started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), inputs=inputs)
    return ReindexPlan(kind, live, target, spec, state_path, resumed), state


def _is_live(kind: str, live: str, target: str, opensearch: str | None) -> bool:
    if kind == "embedded":
        return os.path.exists(live) and os.path.realpath(live) == os.path.realpath(target)
    from sdr_search.indexer.opensearch import OpenSearchStore

    with OpenSearchStore(opensearch, index=live) as store:
        try:
            return store.index_name == target
        except StoreError:  # an alias over several indices: not a finished switch
            return False


def _unused_name(base: str, exists) -> str:
    """``base-<timestamp>``, with ``-2``, ``-3``... appended while that name is taken (two runs in
    one second must never write into the same index)."""
    name = stem = timestamped_name(base)
    n = 1
    while exists(name):
        n += 1
        name = f"{stem}-{n}"
    return name


def _opensearch_index_exists(url: str, name: str) -> bool:
    from sdr_search.indexer.opensearch import OpenSearchStore

    with OpenSearchStore(url, index=name) as store:
        return store.index_name is not None


def dispatcher_for(settings, *, in_process: bool):
    """The Celery queue of ``settings.broker_url`` (checked reachable), or this process when there is
    no broker or ``in_process``."""
    from . import tasks
    from .app import INDEX_TASK, STATS_TASK
    from .dispatch import BrokerWatch, LocalDispatcher, QueueDispatcher

    if in_process or not settings.broker_url:
        logger.info("no broker: indexing in this process")
        return LocalDispatcher({INDEX_TASK: tasks.index_batch, STATS_TASK: tasks.stats_block})
    from sdr_search.core.errors import BackendUnavailableError

    from .app import create_app
    from .dispatch import connection_errors

    app = create_app(settings)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=3)
    except connection_errors() as e:
        raise BackendUnavailableError(f"cannot reach the broker {settings.broker_url}: {e}") from e
    watch = BrokerWatch(settings.broker_url) if settings.broker_url.startswith(("redis://", "rediss://")) else None
    logger.info("sending batches to queue %r at %s", settings.queue, settings.broker_url)
    return QueueDispatcher(app, settings, watch=watch)


def finalise_embedded(path: str) -> int:
    """Build the new store's FAISS index once (workers leave it to the end) and save it, so the
    first reader after the switch does not build it. Returns the rows indexed."""
    t0 = time.perf_counter()
    with open_store_spec(embedded_spec(path), bulk=True) as store:
        rows = store.build_ann()
    logger.info("built the FAISS index of %s (%d sentence rows) in %.1f s", path, rows, time.perf_counter() - t0)
    return rows


def finalise_opensearch(spec: dict[str, str], *, poll_s: float = 5.0) -> dict[str, float | int]:
    """Force-merge the new index to ``SDR_OPENSEARCH_REINDEX_MAX_SEGMENTS`` segments per shard before
    readers switch to it: each segment has its own HNSW graph and the candidate search walks them all,
    and a reindexed generation is written once, then read. Returns the primary segments before and
    after and the seconds it took (empty when the setting is 0)."""
    with open_store_spec(spec) as store:
        most = store.settings.reindex_max_segments
        if most == 0:
            return {}
        t0 = time.perf_counter()
        logged = [t0]

        def progress(segments: int, seconds: float) -> None:
            if time.perf_counter() - logged[0] >= 30:
                logged[0] = time.perf_counter()
                logger.info("merging the segments of %s: %d after %.0f s", spec["index"], segments, seconds)

        before, after = store.merge_segments(most, poll_s=poll_s, progress=progress)
    seconds = round(time.perf_counter() - t0, 2)
    logger.info("merged %s from %d to %d segments (at most %d per shard) in %.1f s", spec["index"], before, after,
                most, seconds)
    return {"segments_before": before, "segments": after, "merge_seconds": seconds}
