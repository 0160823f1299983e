"""Shared Hypothesis strategies: valid gates, near-valid gates, arbitrary JSON-like values, payloads, decisions."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from compute_budget import (
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    SearchGateDecision,
    SearchGateStatus,
    SourceSpan,
    decide,
)
from compute_budget.core.policy.rules import V1
from compute_budget.core.policy.types import GATE_KEYS, SPAN_KEYS

MAX_SAFE = 2**53 - 1

# Any Unicode scalar value (controls, combining marks, astral, U+2028 ...), never a lone surrogate.
valid_chars = st.characters(codec="utf-8")
valid_text = st.text(valid_chars, max_size=24)
nonempty_text = st.text(valid_chars, min_size=1, max_size=24)
# Every code point, lone surrogates included: what a hostile or broken producer might hand over.
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
# Strings that are likely to matter: the policy's own vocabulary and its near misses.
REASON_CODES = tuple(V1.table)
NEAR_MISS_REASONS = (
    "Eligible_Missing_Role",
    "eligible_missing_role ",
    " eligible_missing_role",
    "ELIGIBLE_MISSING_ROLE",
    "eligible_missing_role\u200b",
    "eligible_please_search_forever",
)
reason_codes = st.one_of(st.sampled_from(REASON_CODES + NEAR_MISS_REASONS), nonempty_text)
safe_ints = st.integers(min_value=0, max_value=MAX_SAFE)
small_or_edge_ints = st.one_of(st.integers(min_value=0, max_value=1000), st.sampled_from((0, MAX_SAFE - 1, MAX_SAFE)))


@st.composite
def spans(draw: st.DrawFn) -> SourceSpan:
    """A well-formed `SourceSpan` (0 <= start <= end <= 2**53 - 1)."""
    a = draw(small_or_edge_ints)
    b = draw(small_or_edge_ints)
    return SourceSpan(text=draw(valid_text), start=min(a, b), end=max(a, b), sentence_index=draw(small_or_edge_ints))


@st.composite
def gates(draw: st.DrawFn) -> SearchGateDecision:
    """A well-formed `SearchGateDecision` of any status, with table, near-miss or arbitrary reason codes."""
    return SearchGateDecision(
        decision_id=draw(nonempty_text),
        policy_version=draw(st.one_of(st.just("search_gate.v1"), nonempty_text)),
        input_digest=draw(nonempty_text),
        status=draw(st.sampled_from(SearchGateStatus)),
        reason_code=draw(reason_codes),
        residual_ids=tuple(draw(st.lists(valid_text, max_size=3))),
        candidate_organ=draw(st.one_of(st.none(), valid_text)),
        evidence_spans=tuple(draw(st.lists(spans(), max_size=3))),
    )


gate_dicts = gates().map(SearchGateDecision.to_dict)

# Arbitrary JSON-like values: what `json.loads` can return, plus lone surrogates in strings and keys.
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(any_text, st.sampled_from(sorted(GATE_KEYS | SPAN_KEYS))), children, max_size=6),
    ),
    max_leaves=20,
)


@st.composite
def near_valid_gates(draw: st.DrawFn) -> Any:
    """A valid gate's JSON form with one to three mutations: a key dropped, added or renamed, a value or span
    field replaced by an arbitrary JSON-like value, or the whole gate wrapped."""
    gate: Any = copy.deepcopy(draw(gate_dicts))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if not isinstance(gate, dict):
            break
        kind = draw(st.sampled_from(("drop", "add", "rename", "replace", "span", "span_key", "wrap")))
        keys = sorted(gate, key=str)
        if kind == "drop" and keys:
            del gate[draw(st.sampled_from(keys))]
        elif kind == "add":
            gate[draw(any_text)] = draw(json_values)
        elif kind == "rename" and keys:
            key = draw(st.sampled_from(keys))
            gate[draw(st.sampled_from((key.upper(), key + " ", "_" + key)))] = gate.pop(key)
        elif kind == "replace" and keys:
            gate[draw(st.sampled_from(keys))] = draw(json_values)
        elif kind in ("span", "span_key") and isinstance(gate.get("evidence_spans"), list) and gate["evidence_spans"]:
            span = draw(st.sampled_from(gate["evidence_spans"]))
            if isinstance(span, dict):
                field = draw(st.sampled_from(sorted(SPAN_KEYS)))
                if kind == "span":
                    span[field] = draw(
                        st.one_of(json_values, st.sampled_from((True, False, 5.0, -1, 2**53, "5", None)))
                    )
                else:
                    span[field + draw(st.sampled_from(("", "_")))] = span.pop(field, None)
                    span[draw(any_text)] = 0
        elif kind == "wrap":
            gate = draw(st.sampled_from(([gate], {"gate": gate})))
    return gate


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """An eleven-key `budget_id` payload with arbitrary valid text and integers in 0 .. 2**53 - 1."""
    return {
        "policy_version": draw(valid_text),
        "gate_decision_id": draw(valid_text),
        "gate_policy_version": draw(valid_text),
        "gate_input_digest": draw(valid_text),
        "status": draw(st.sampled_from([status.value for status in ComputeBudgetStatus])),
        "reason_code": draw(valid_text),
        "max_candidates": draw(safe_ints),
        "max_depth": draw(safe_ints),
        "max_steps": draw(safe_ints),
        "max_parallelism": draw(safe_ints),
        "evidence_spans": [span.to_dict() for span in draw(st.lists(spans(), max_size=3))],
    }


@st.composite
def free_decisions(draw: st.DrawFn) -> ComputeBudgetDecision:
    """A `ComputeBudgetDecision` with arbitrary well-typed fields (not necessarily one `decide` would make)."""
    return ComputeBudgetDecision(
        budget_id=draw(valid_text),
        policy_version=draw(valid_text),
        gate_decision_id=draw(valid_text),
        gate_policy_version=draw(valid_text),
        gate_input_digest=draw(valid_text),
        status=draw(st.sampled_from(ComputeBudgetStatus)),
        reason_code=draw(valid_text),
        max_candidates=draw(safe_ints),
        max_depth=draw(safe_ints),
        max_steps=draw(safe_ints),
        max_wallclock_ms=draw(st.one_of(st.none(), safe_ints)),
        max_parallelism=draw(safe_ints),
        evidence_spans=tuple(draw(st.lists(spans(), max_size=3))),
        explanation=draw(valid_text),
    )


# Decisions as `decide` makes them, from valid and near-valid gates alike.
decided = st.one_of(gates(), gate_dicts, near_valid_gates()).map(decide)
decisions = st.one_of(decided, free_decisions())
