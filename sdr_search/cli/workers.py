"""``sdr reindex`` (:mod:`sdr_search.workers.plan`, :mod:`~sdr_search.workers.reindex`,
:mod:`~sdr_search.workers.swap`) and ``sdr worker`` (a Celery worker, :mod:`sdr_search.workers.app`)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from sdr_search.core.errors import IndexNotFoundError, InputReadError, InvalidInputError, SDRError

from .args import segmentation_settings

__all__ = ["cmd_reindex", "cmd_worker", "worker_argv"]

logger = logging.getLogger("sdr")


def _worker_settings(**overrides: Any):
    from pydantic import ValidationError

    from sdr_search.workers.settings import WorkerSettings

    try:
        return WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        raise InvalidInputError(f"invalid worker settings: {e}") from e


def cmd_reindex(args) -> int:
    from sdr_search.workers import tasks
    from sdr_search.workers.app import STATS_TASK
    from sdr_search.workers.dispatch import QueueDispatcher, run_all
    from sdr_search.workers.plan import dispatcher_for, finalise_embedded, finalise_opensearch, plan_reindex
    from sdr_search.workers.records import batch_records, count_records, iter_records
    from sdr_search.workers.reindex import IndexJob, JobTimeout
    from sdr_search.workers.stores import open_store_spec, spec_label
    from sdr_search.workers.swap import swap_opensearch_alias, switch_symlink

    t0 = time.perf_counter()
    in_process = bool(args.in_process)
    settings = _worker_settings(broker_url=args.workers_broker, batch_docs=args.batch_docs)
    seg = segmentation_settings(args)
    inputs = [os.path.abspath(p) for p in args.paths]
    for p in inputs:
        if not os.path.exists(p):
            raise InputReadError(f"input path {p} does not exist")
    plan, state = plan_reindex(inputs, store=args.store, opensearch=args.opensearch, index=args.index,
                               restart=args.restart)
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

    dispatcher = dispatcher_for(settings, in_process=local)
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
            out.update(swapped=False, complete=False, seconds=round(time.perf_counter() - t0, 1))
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
        finalise_embedded(plan.target)
        out["ann_seconds"] = round(time.perf_counter() - t_ann, 2)
        previous = switch_symlink(Path(plan.live), Path(plan.target))
        out["previous"] = str(previous) if previous else None
    else:
        out.update(finalise_opensearch(plan.spec))
        out["previous"] = swap_opensearch_alias(args.opensearch, plan.live, plan.target)
    plan.state_path.unlink(missing_ok=True)
    out.update(swapped=True, complete=True, seconds=round(time.perf_counter() - t0, 1))
    sys.stdout.write(json.dumps(out) + "\n")
    return 1 if out["failed"] else 0


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
    from sdr_search.workers.app import create_app

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
