"""Progress on a terminal: Rich bars on stderr, only when stderr is a terminal (pipes and files stay clean)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO


@contextmanager
def audit_progress() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar with rows/s and ETA on stderr, only when stderr is a terminal (`phase_progress`'s one
    phase, "auditing")."""
    with phase_progress() as phases:
        if phases is None:
            yield None
            return
        report = phases

        def update(done: int, total: int) -> None:
            report("auditing", done, total)

        yield update


@contextmanager
def phase_progress() -> Iterator[Callable[[str, int, int], None] | None]:
    """A progress bar per phase (`publish`: auditing, then publishing), rows with rows/s and ETA, on stderr, only
    when stderr is a terminal; the callback is told (phase, done, total)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} rows/s"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=None, rate="-")
            speed = next(task for task in progress.tasks if task.id == tasks[phase]).speed
            progress.update(tasks[phase], completed=done, total=total or None,
                            rate=f"{speed:,.0f}" if speed else "-")

        yield update


@contextmanager
def progress_bar(stream: BinaryIO, label: str) -> Iterator[Iterator[bytes]]:
    """Lines of `stream`, with a progress bar on stderr by bytes read, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield iter(stream)
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    total: int | None = None
    try:
        total = os.fstat(stream.fileno()).st_size or None
    except (OSError, ValueError, AttributeError):
        total = None
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=total)

        def lines() -> Iterator[bytes]:
            for line in stream:
                progress.advance(task, len(line))  # Rich's progress is thread-safe: gates are read ahead
                yield line

        yield lines()
