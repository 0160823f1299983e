"""`--retired KEY@SIZE` and `--revoked KEY@SIZE:ROOT` (issue 31, items 1 and 2): the operator's word on which writer
keys still sign, shared by `audit`, `verify-proof`, `consistency`, `prove` and `rotate`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def key_state_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--retired KEY@SIZE` and `--revoked KEY@SIZE:ROOT`, both repeatable (parsed by `auditor.key_states`)."""
    command = click.option(
        "--revoked", "revoked", metavar="KEY@SIZE:ROOT", multiple=True,
        help="KEY leaked: its signature counts only on a checkpoint consistent with tree SIZE and ROOT (base64), "
        "none above SIZE; repeatable.",
    )(command)
    return click.option(
        "--retired", "retired", metavar="KEY@SIZE", multiple=True,
        help="KEY was handed over at SIZE (`rotate`): its signature on a checkpoint above SIZE does not count; "
        "repeatable.",
    )(command)
