"""Handlers of ``sdr reindex`` and ``sdr worker`` (argument parsing lives in sdr_search.cli)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sdr_search.core.errors import IndexNotFoundError, InputReadError, InvalidInputError, SDRError, StoreError

__all__ = ["cmd_reindex", "cmd_worker"]

logger = logging.getLogger("sdr")


def _worker_settings(**overrides: Any):
    from pydantic import ValidationError

    from .settings import WorkerSettings

    try:
        return WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        raise InvalidInputError(f"invalid worker settings: {e}") from e


# =============================================================================================
# sdr reindex
# =============================================================================================
@dataclass
class _Plan:
    kind: str  # "embedded" | "opensearch"
    live: str  # link path or alias
    target: str  # directory or concrete index
    spec: dict[str, str]
    state_path: Path
    resumed: bool


def _plan(args, inputs: list[str]) -> tuple[_Plan, Any]:
    from .stores import embedded_spec, opensearch_spec
    from .swap import ReindexState, embedded_state_path, opensearch_state_path

    if args.store is not None:
        link = Path(os.path.abspath(args.store))
        state_path = embedded_state_path(link)
        kind, live = "embedded", str(link)
    else:
        from sdr_search.indexer.opensearch.settings import OpenSearchSettings
        from sdr_search.core.settings import CacheSettings

        alias = args.index or OpenSearchSettings().index
        state_path = opensearch_state_path(CacheSettings().cache_dir, args.opensearch, alias)
        kind, live = "opensearch", alias
    state = None if args.restart else ReindexState.load(state_path)
    if args.restart and state_path.exists():
        logger.warning("--restart: ignoring the unfinished reindex recorded in %s", state_path)
    if state is not None and (state.kind != kind or state.live != live):
        raise InvalidInputError(f"{state_path} belongs to another reindex ({state.kind} {state.live}); delete it or use --restart")
    if state is not None and kind == "embedded" and not Path(state.target).is_dir():
        logger.warning("the unfinished reindex target %s is gone; starting a new one", state.target)
        state = None
    if state is not None and _is_live(kind, live, state.target, args):
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
        target = _unused_name(live, lambda n: _opensearch_index_exists(args.opensearch, n))
    spec = embedded_spec(target) if kind == "embedded" else opensearch_spec(args.opensearch, target)
    resumed = state is not None
    if state is None:
        state = ReindexState(target=target, live=live, kind=kind,
                             started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), inputs=inputs)
    return _Plan(kind, live, target, spec, state_path, resumed), state


def _is_live(kind: str, live: str, target: str, args) -> bool:
    if kind == "embedded":
        return os.path.exists(live) and os.path.realpath(live) == os.path.realpath(target)
    from sdr_search.indexer.opensearch import OpenSearchStore

    with OpenSearchStore(args.opensearch, index=live) as store:
        try:
            return store.index_name == target
        except StoreError:  # an alias over several indices: not a finished switch
            return False


def _unused_name(base: str, exists) -> str:
    """``base-<timestamp>``, with ``-2``, ``-3``... appended while that name is taken (two runs in
    one second must never write into the same index)."""
    from .swap import timestamped_name

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


def _dispatcher(settings, *, in_process: bool):
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


def _finalise_embedded(path: str) -> int:
    """Build the new store's FAISS index once (workers leave it to the end) and save it, so the
    first reader after the switch does not build it. Returns the rows indexed."""
    from .stores import embedded_spec, open_store_spec

    t0 = time.perf_counter()
    with open_store_spec(embedded_spec(path), bulk=True) as store:
        rows = store.build_ann()
    logger.info("built the FAISS index of %s (%d sentence rows) in %.1f s", path, rows, time.perf_counter() - t0)
    return rows


def cmd_reindex(args) -> int:
    from sdr_search.cli_args import segmentation_settings

    from . import tasks
    from .app import STATS_TASK
    from .dispatch import QueueDispatcher, run_all
    from .records import batch_records, count_records, iter_records
    from .reindex import IndexJob, JobTimeout
    from .stores import open_store_spec, spec_label
    from .swap import swap_opensearch_alias, switch_symlink

    t0 = time.perf_counter()
    in_process = bool(args.in_process)
    settings = _worker_settings(broker_url=args.workers_broker, batch_docs=args.batch_docs)
    seg = segmentation_settings(args)
    inputs = [os.path.abspath(p) for p in args.paths]
    for p in inputs:
        if not os.path.exists(p):
            raise InputReadError(f"input path {p} does not exist")
    plan, state = _plan(args, inputs)
    options = {
        "encoder": {k: v for k, v in {"model": args.model, "max_tokens": args.max_tokens, "precision": args.precision}.items()
                    if v is not None},
        "segmentation": seg.recorded(),
        "cache": not args.no_cache,
    }
    local = in_process or not settings.broker_url
    if local:  # device and cache directory are each worker's own business, but ours when we encode
        if args.device is not None:
            options["encoder"]["device"] = args.device
        if args.cache_dir is not None:
            options["cache_dir"] = str(args.cache_dir)
    with open_store_spec(plan.spec, create=True) as store:
        if plan.kind == "embedded":
            store.counts()  # creates the directory and catalogue now (workers never create a store)
        present = set()
        if plan.resumed:
            try:
                present = set(store.iter_ids())
            except IndexNotFoundError:  # an OpenSearch index is created by the first write
                pass
    state.save(plan.state_path)
    logger.info("reindex %s -> %s%s", plan.live, plan.target, f" (resuming, {len(present)} documents there)" if plan.resumed else "")

    dispatcher = _dispatcher(settings, in_process=local)
    out: dict[str, Any] = {"index": plan.target if plan.kind == "opensearch" else os.path.basename(plan.target),
                           "target": spec_label(plan.spec), "live": plan.live, "resumed": plan.resumed}
    try:
        total = count_records(inputs)
        processes = dispatcher.worker_processes()
        if isinstance(dispatcher, QueueDispatcher):
            if processes:
                logger.info("%d worker process(es) listening on queue %r", processes, settings.queue)
            else:
                logger.warning("no worker is listening yet; batches wait in queue %r (start one with `sdr worker`)",
                               settings.queue)
        items = batch_records(iter_records(inputs, settings=seg, strict=args.strict), max_docs=settings.batch_docs,
                              max_chars=settings.batch_chars, total=total, workers=processes)
        job = IndexJob(plan.spec, options, dispatcher, present=present, progress=not args.no_progress, total=total)
        try:
            summary = job.run(items, timeout=args.timeout)
        except JobTimeout as e:
            logger.error("%s", e)
            out.update(e.summary.to_dict(), swapped=False, complete=False,
                       seconds=round(time.perf_counter() - t0, 1), failures=e.summary.failures)
            sys.stdout.write(json.dumps(out) + "\n")
            return 1
        out.update(summary.to_dict())
        if summary.failures:
            out["failures"] = summary.failures
        done = summary.indexed + summary.skipped
        fraction = summary.failed / summary.total if summary.total else 0.0
        if done == 0:
            raise SDRError(f"no document could be indexed into {plan.target}; {plan.live} is unchanged")
        if fraction > args.max_failed_fraction:
            logger.error("%d of %d documents failed (more than --max-failed-fraction %.3g); %s still serves the old "
                         "index, the new one is kept at %s", summary.failed, summary.total, args.max_failed_fraction,
                         plan.live, plan.target)
            out.update(swapped=False, seconds=round(time.perf_counter() - t0, 1))
            sys.stdout.write(json.dumps(out) + "\n")
            return 1
        if not args.no_stats:
            # Statistics blocks go through the same dispatcher (workers, or this process).
            info = tasks.refresh_stats(
                plan.spec, exact=False, sample_size=args.sample, seed=args.seed,
                run_blocks=lambda spec, blocks, opts: run_all(dispatcher, STATS_TASK, [(spec, b, opts) for b in blocks]),
            )
            out["stats"] = info.to_dict()
    finally:
        dispatcher.close()
    with open_store_spec(plan.spec) as store:
        out["documents"] = store.counts()
    if plan.kind == "embedded":
        t_ann = time.perf_counter()
        _finalise_embedded(plan.target)
        out["ann_seconds"] = round(time.perf_counter() - t_ann, 2)
        previous = switch_symlink(Path(plan.live), Path(plan.target))
        out["previous"] = str(previous) if previous else None
    else:
        out["previous"] = swap_opensearch_alias(args.opensearch, plan.live, plan.target)
    plan.state_path.unlink(missing_ok=True)
    out.update(swapped=True, complete=True, seconds=round(time.perf_counter() - t0, 1))
    sys.stdout.write(json.dumps(out) + "\n")
    return 1 if out["failed"] else 0


# =============================================================================================
# sdr worker
# =============================================================================================
def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def worker_argv(settings, *, concurrency: int, pool: str | None, name: str | None, loglevel: str) -> list[str]:
    """The ``celery worker`` arguments of ``sdr worker``."""
    argv = [
        "worker", f"--loglevel={loglevel}", f"--concurrency={concurrency}",
        f"--pool={pool or ('solo' if concurrency == 1 else 'prefork')}",
        "--queues", settings.queue,
        # Our tasks use neither revokes nor worker events: skip the start-up sync and gossip traffic.
        "--without-mingle", "--without-gossip",
    ]
    if name:
        argv += ["--hostname", name]
    return argv


def cmd_worker(args) -> int:
    from .app import create_app

    settings = _worker_settings(broker_url=args.broker)
    if not settings.broker_url:
        raise InvalidInputError("sdr worker needs a broker: --broker URL, SDR_BROKER_URL or REDIS_URL")
    concurrency = max(1, args.concurrency)
    threads = args.threads or settings.torch_threads or max(1, _cpu_count() // concurrency)
    os.environ["SDR_TORCH_THREADS"] = str(threads)  # read by every worker process (prefork children too)
    logger.info("starting %d worker process(es), %d torch thread(s) each, queue %r", concurrency, threads, settings.queue)
    app = create_app(settings.model_copy(update={"torch_threads": threads}))
    app.worker_main(worker_argv(settings, concurrency=concurrency, pool=args.pool, name=args.name,
                                loglevel=args.log_level))
    return 0
