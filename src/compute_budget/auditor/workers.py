"""The audit's processes: the first range in the auditing process, the others each in a worker, and how a
worker dies with its parent."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.pool
import os
import signal
import threading
import time
from collections.abc import Callable

from compute_budget.auditor.look_back import LookedBack
from compute_budget.auditor.ranges import (
    BATCH_ROWS,
    FORKED_WORKERS,
)
from compute_budget.auditor.source import AuditSource, SourceLocation
from compute_budget.auditor.tree import Seal, SealTask, tree_check
from compute_budget.core.seal_checks import TreeOutcome
from compute_budget.core.verify import RangeResult, check_row

ORPHAN_POLL_SECONDS = 0.2


def run_parallel(
    store: AuditSource,
    tasks: list[tuple[int, int, tuple[int, str]]],
    seal: Seal,
    on_progress: Callable[[int, int], None] | None,
    looking_back: Callable[[], LookedBack] | None = None,
) -> tuple[list[tuple[RangeResult, TreeOutcome | None]], LookedBack | None]:
    """The first range in this process, the others each in a worker process, all at once: the parent would
    otherwise only wait, and its store is open already. The look-back, if any, runs here too, once the workers
    have their ranges. Progress counts this process's rows as they go and
    each worker's once it is done. Leaving (done, an error, Ctrl-C or SIGTERM) terminates the workers at once:
    an interrupted audit must not wait for them to finish their ranges."""
    total = sum(high - low for low, high, _ in tasks)
    with worker_pool(len(tasks) - 1) as pool:
        pending = [
            pool.apply_async(_audit_range_in_worker, (store.location, low, high, anchor, seal.task(index)))
            for index, (low, high, anchor) in enumerate(tasks)
            if index > 0
        ]
        looked_back = looking_back() if looking_back is not None else None
        low, high, anchor = tasks[0]
        first = audit_range(store, low, high, anchor, on_progress, total, seal.task(0))
        results = [first]
        done = first[0].rows
        for item in pending:
            results.append(item.get())
            done += results[-1][0].rows
            if on_progress is not None:
                on_progress(done, total)
        return results, looked_back


def worker_pool(workers: int) -> multiprocessing.pool.Pool:
    """Worker processes, forked where `FORKED_WORKERS` (started at once, before the pool's own threads)."""
    context = multiprocessing.get_context("fork") if FORKED_WORKERS else multiprocessing.get_context()
    return context.Pool(processes=workers, initializer=_quiet_worker)


def _quiet_worker() -> None:
    """A worker leaves Ctrl-C to the auditing process, which stops it, and dies at once on SIGTERM (a forked
    worker would otherwise inherit the command line's handler and print a traceback as it goes), and prints none of
    the database libraries' log lines. It also dies, silently, within `ORPHAN_POLL_SECONDS` of its parent being
    killed outright (SIGKILL, the OOM killer), which no handler sees: an orphan would go on reading the store and
    print a BrokenPipeError when done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A lost server is the parent's one line to say: the libraries' own log lines (SQLAlchemy's pool logs a failed
    # close with a traceback) must not reach stderr from here. A forked worker has the command line's handlers already.
    for name in ("sqlalchemy", "psycopg"):
        if not logging.getLogger(name).handlers:
            logging.getLogger(name).addHandler(logging.NullHandler())
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_SECONDS)
        os._exit(1)  # the parent is gone: nobody will read this worker's result

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _audit_range_in_worker(
    location: SourceLocation, low: int, high: int, anchor: tuple[int, str], task: SealTask
) -> tuple[RangeResult, TreeOutcome | None]:
    with location.reopen() as store:
        return audit_range(store, low, high, anchor, None, 0, task)


def audit_range(
    store: AuditSource,
    low: int,
    high: int,
    anchor: tuple[int, str],
    on_progress: Callable[[int, int], None] | None,
    total: int,
    task: SealTask,
) -> tuple[RangeResult, TreeOutcome | None]:
    """Check rows with low < seq <= high, in order, each against the stored row before it, and the tree over them
    from the task's starting frontier (none: the parent recomputes it)."""
    result = RangeResult()
    prev_seq, prev_chain = anchor
    frontier = task.frontier()
    with store.snapshot() as snapshot:
        tree = tree_check(snapshot, low, high, task, frontier) if frontier is not None else None
        leaves = result.leaves
        for batch in store.scan(low, high, batch_rows=BATCH_ROWS):
            result.findings += store.take_findings()  # e.g. a publication's entries that differ from their tiles
            for row in batch:
                prev_seq, prev_chain = check_row(row, prev_seq, prev_chain, result)
            if tree is not None:
                tree.add(leaves, batch)
            leaves.clear()
            if on_progress is not None:
                on_progress(result.rows, total)
        outcome = tree.finish() if tree is not None else None
    if on_progress is not None:
        on_progress(result.rows, total)
    return result, outcome
