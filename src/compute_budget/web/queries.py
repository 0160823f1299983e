"""The decisions page's query string: its parameters read and checked (`BadQuery` names a bad one), and the links
that carry them."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.errors import BadQuery
from compute_budget.store.browse import MAX_PAGE_ROWS, DecisionFilter

PAGE_ROWS = 50
MAX_FILTER_TEXT = 1000
SEQ_LIMIT = 2**63 - 1
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Query:
    """The decisions page's parameters, as given (empty form fields count as absent)."""

    where: DecisionFilter
    limit: int

    def params(self, **changes: object) -> dict[str, str]:
        """The query string's parameters (by their public names), with `changes` applied (None drops one)."""
        where = self.where
        values: dict[str, object] = {
            "status": where.status,
            "reason": where.reason_code,
            "gate": where.gate_decision_id,
            "policy_version": where.policy_version,
            "after_seq": where.after_seq,
            "before_seq": where.before_seq,
            "limit": None if self.limit == PAGE_ROWS else self.limit,
        }
        values.update(changes)
        return {name: str(value) for name, value in values.items() if value is not None}

    def href(self, path: str = "/", **changes: object) -> str:
        """A link to `path` with these parameters and `changes`."""
        params = self.params(**changes)
        return path + ("?" + urllib.parse.urlencode(params) if params else "")

    @property
    def filtered(self) -> bool:
        """True when any filter other than the page position is given."""
        where = self.where
        given = (where.status, where.reason_code, where.gate_decision_id, where.policy_version, where.after_seq)
        return any(value is not None for value in given)


def parse_query(params: Mapping[str, str]) -> Query:
    """The decisions page's parameters from a query string; raises `BadQuery` naming a bad one."""
    limit = int_param(params, "limit", low=1, high=MAX_PAGE_ROWS)
    return Query(
        DecisionFilter(
            status=_status_param(params),
            reason_code=_text_param(params, "reason"),
            gate_decision_id=_text_param(params, "gate"),
            policy_version=_text_param(params, "policy_version"),
            after_seq=int_param(params, "after_seq", low=0, high=SEQ_LIMIT),
            before_seq=int_param(params, "before_seq", low=1, high=SEQ_LIMIT),
        ),
        PAGE_ROWS if limit is None else limit,
    )


def _status_param(params: Mapping[str, str]) -> str | None:
    value = _text_param(params, "status")
    if value is not None and value not in {status.value for status in ComputeBudgetStatus}:
        choices = ", ".join(status.value for status in ComputeBudgetStatus)
        raise BadQuery(f"status {value[:40]!r} is not a budget status (one of: {choices})")
    return value


def _text_param(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    if len(value) > MAX_FILTER_TEXT:
        raise BadQuery(f"{name} is longer than {MAX_FILTER_TEXT} characters")
    return value


def int_param(params: Mapping[str, str], name: str, *, low: int, high: int) -> int | None:
    """The whole number `name` in `params` between `low` and `high` (None when absent or blank)."""
    value = params.get(name)
    if value is None or value.strip() == "":
        return None
    if not re.fullmatch(r"\s*[0-9]{1,19}\s*", value):
        raise BadQuery(f"{name} must be a whole number from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise BadQuery(f"{name} must be a whole number from {low} to {high}")
    return number


def is_budget_id(text: str) -> bool:
    """True for 64 lowercase hex digits."""
    return _HEX64.fullmatch(text) is not None


def only_status_reason(where: DecisionFilter) -> DecisionFilter:
    """The filters the cached whole-store counts can apply: status and reason alone."""
    return DecisionFilter(status=where.status, reason_code=where.reason_code)
