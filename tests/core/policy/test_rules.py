"""Policy v1 (spec section 3.2): the table, the evaluation order, copied fields, totality, and the registry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from compute_budget import (
    COMPUTE_BUDGET_POLICY_VERSION,
    POLICIES,
    BudgetTable,
    ComputeBudgetDecision,
    ComputeBudgetStatus,
    Limits,
    SearchGateDecision,
    SearchGateStatus,
    SourceSpan,
    UnsupportedPolicyVersion,
    compute_budget_id,
    decide,
    policy_for,
)
from compute_budget.core.policy.gate import nests_too_deep
from compute_budget.core.policy.rules import V1
from tests import strategies
from tests.conftest import make_gate

ZERO = (0, 0, 0, 0)
SPANS: list[dict[str, Any]] = [
    {"text": "second", "start": 10, "end": 16, "sentence_index": 1},
    {"text": "first", "start": 0, "end": 5, "sentence_index": 0},
]


def limits(decision: ComputeBudgetDecision) -> tuple[int, int, int, int]:
    """(candidates, depth, steps, parallelism) of a decision."""
    return decision.max_candidates, decision.max_depth, decision.max_steps, decision.max_parallelism


def assert_consistent(decision: ComputeBudgetDecision) -> None:
    """Invariants of every v1 decision, whatever the gate was."""
    assert isinstance(decision, ComputeBudgetDecision)
    assert decision.policy_version == COMPUTE_BUDGET_POLICY_VERSION
    assert decision.max_wallclock_ms is None
    assert decision.status is not ComputeBudgetStatus.BUDGET_ZERO
    assert isinstance(decision.status, ComputeBudgetStatus)
    if decision.status is not ComputeBudgetStatus.BUDGET_ALLOWED:
        assert limits(decision) == ZERO
    for text in (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest):
        assert type(text) is str
        text.encode("utf-8")  # valid Unicode text, so the decision can always be written as JSON
    assert decision.budget_id == compute_budget_id(decision)
    assert len(decision.budget_id) == 64
    assert set(decision.budget_id) <= set("0123456789abcdef")  # lowercase hex digits only
    assert isinstance(decision.explanation, str)
    assert decision.explanation


# The table of spec 3.2, row by row.
@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("eligible_missing_role", (5, 2, 10, 1)),
        ("eligible_missing_relation", (5, 2, 10, 1)),
        ("eligible_missing_proposal", (3, 1, 5, 1)),
        ("eligible_target_unbound", (5, 2, 10, 1)),
    ],
)
def test_each_allowed_row(reason: str, expected: tuple[int, int, int, int]) -> None:
    """An eligible gate with a table reason is allowed with exactly that row's limits."""
    decision = decide(make_gate(reason_code=reason, evidence_spans=SPANS))
    assert decision.status is ComputeBudgetStatus.BUDGET_ALLOWED
    assert decision.reason_code == reason
    assert limits(decision) == expected
    assert decision.evidence_spans == tuple(SourceSpan(**span) for span in SPANS)
    assert_consistent(decision)


def test_the_v1_table_is_exactly_the_spec() -> None:
    """V1's table holds the four rows of spec 3.2 and nothing else."""
    assert dict(V1.table) == {
        "eligible_missing_role": Limits(5, 2, 10, 1),
        "eligible_missing_relation": Limits(5, 2, 10, 1),
        "eligible_missing_proposal": Limits(3, 1, 5, 1),
        "eligible_target_unbound": Limits(5, 2, 10, 1),
    }


@pytest.mark.parametrize("status", ["ineligible", "blocked", "unassessable"])
@pytest.mark.parametrize("reason", ["eligible_missing_role", "no_residual", "x"])
def test_each_non_eligible_status_is_blocked(status: str, reason: str) -> None:
    """A non-eligible gate is budget_blocked with reason gate_<status> and zero limits, whatever its reason."""
    decision = decide(make_gate(status=status, reason_code=reason, evidence_spans=SPANS))
    assert decision.status is ComputeBudgetStatus.BUDGET_BLOCKED
    assert decision.reason_code == f"gate_{status}"
    assert limits(decision) == ZERO
    assert decision.evidence_spans == tuple(SourceSpan(**span) for span in SPANS)  # well-formed: spans copied
    assert (decision.gate_decision_id, decision.gate_input_digest) == ("gate-0001", make_gate()["input_digest"])
    assert_consistent(decision)


@pytest.mark.parametrize(
    "reason",
    [
        "Eligible_Missing_Role",
        "eligible_missing_role ",
        " eligible_missing_role",
        "ELIGIBLE_MISSING_ROLE",
        "eligible_missing_role\n",
        "eligible_missing_role\u200b",
        "eligible-missing-role",
        "eligible_missing_rol",
        "eligible_please_search_forever",
        "eligible",
        "gate_ineligible",
        "e\u0301ligible_missing_role",
    ],
)
def test_unknown_and_near_miss_reasons_are_unassessable(reason: str) -> None:
    """An eligible gate whose reason is not exactly a table key fails closed as unknown_gate_reason_code."""
    decision = decide(make_gate(reason_code=reason, evidence_spans=SPANS))
    assert decision.status is ComputeBudgetStatus.BUDGET_UNASSESSABLE
    assert decision.reason_code == "unknown_gate_reason_code"
    assert limits(decision) == ZERO
    assert decision.evidence_spans == tuple(SourceSpan(**span) for span in SPANS)
    assert decision.gate_decision_id == "gate-0001"
    assert_consistent(decision)


@pytest.mark.parametrize(
    "gate",
    [
        pytest.param(make_gate(extra=1), id="extra-key"),
        pytest.param(make_gate(status="ELIGIBLE"), id="status-case"),
        pytest.param(make_gate(reason_code=""), id="empty-reason"),
        pytest.param(make_gate(evidence_spans=[{"text": "x", "start": 1, "end": 0, "sentence_index": 0}]),
                     id="end-before-start"),
        pytest.param(make_gate(status="blocked", residual_ids=None), id="blocked-but-malformed"),
        pytest.param(make_gate(reason_code="eligible_missing_role", candidate_organ="\ud800"), id="surrogate"),
    ],
)
def test_malformed_gates_are_unassessable(gate: dict[str, Any]) -> None:
    """A malformed gate is budget_unassessable / malformed_gate_decision with no limits and no spans."""
    decision = decide(gate)
    assert decision.status is ComputeBudgetStatus.BUDGET_UNASSESSABLE
    assert decision.reason_code == "malformed_gate_decision"
    assert limits(decision) == ZERO
    assert decision.evidence_spans == ()
    assert_consistent(decision)


def test_malformed_takes_precedence_over_status() -> None:
    """Malformedness is checked first: a blocked gate with an extra key is malformed, not blocked."""
    assert decide(make_gate(status="blocked", extra=1)).reason_code == "malformed_gate_decision"


def test_copied_fields_of_a_well_formed_gate() -> None:
    """gate_decision_id, gate_policy_version and gate_input_digest are the gate's own values."""
    decision = decide(make_gate(decision_id="d-\U0001f600", policy_version="pv\u2028", input_digest="e\u0301"))
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == (
        "d-\U0001f600",
        "pv\u2028",
        "e\u0301",
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"extra": 1}, ("gate-0001", "search_gate.v1", "sha256:5d41402abc4b2a76b9719d911017c592"),
                     id="valid-strings-copied"),
        pytest.param({"decision_id": ""}, ("", "search_gate.v1", "sha256:5d41402abc4b2a76b9719d911017c592"),
                     id="empty-string-copied"),
        pytest.param({"decision_id": 7, "policy_version": None, "input_digest": ["x"]}, ("", "", ""),
                     id="non-strings-blank"),
        pytest.param({"decision_id": "a\ud800", "input_digest": "\udc00"}, ("", "search_gate.v1", ""),
                     id="lone-surrogates-blank"),
        pytest.param({"decision_id": "keep-me", "status": "nope"}, ("keep-me", "search_gate.v1",
                     "sha256:5d41402abc4b2a76b9719d911017c592"), id="bad-status-ids-kept"),
    ],
)
def test_copied_fields_of_a_malformed_gate(changes: dict[str, Any], expected: tuple[str, str, str]) -> None:
    """For a malformed gate each identifying field is copied when it is valid text, else it is ""."""
    decision = decide(make_gate(**changes))
    assert decision.reason_code == "malformed_gate_decision"
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == expected
    assert decision.evidence_spans == ()


def test_copied_fields_when_keys_are_missing() -> None:
    """A missing identifying key is copied as ""; the others present are still copied."""
    gate = make_gate()
    del gate["policy_version"]
    decision = decide(gate)
    assert (decision.gate_decision_id, decision.gate_policy_version) == ("gate-0001", "")


@pytest.mark.parametrize("gate", [None, 0, "gate-0001", ["gate-0001"], b"{}", 1.5, True, object()])
def test_non_mapping_gates_copy_nothing(gate: object) -> None:
    """A gate that is not a mapping at all is malformed with every copied field empty."""
    decision = decide(gate)
    assert decision.reason_code == "malformed_gate_decision"
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == ("", "", "")
    assert_consistent(decision)


def test_copied_str_subclass_becomes_plain_text() -> None:
    """A str subclass in a copied field is copied as its plain text."""

    class Tagged(str):
        """A str subclass."""

    decision = decide(make_gate(decision_id=Tagged("tagged"), extra=1))
    assert type(decision.gate_decision_id) is str
    assert decision.gate_decision_id == "tagged"


def test_malformed_decisions_differ_by_copied_fields() -> None:
    """Two malformed gates with different decision ids get different budget_ids."""
    assert decide(make_gate(extra=1)).budget_id != decide(make_gate(extra=1, decision_id="gate-0002")).budget_id


def test_gate_instances_and_their_json_forms_decide_alike() -> None:
    """decide gives the same decision for a SearchGateDecision and for its JSON form."""
    gate = SearchGateDecision.from_dict(make_gate(evidence_spans=SPANS))
    assert decide(gate) == decide(gate.to_dict()) == decide(make_gate(evidence_spans=SPANS))


def test_search_gate_decision_with_bad_values_is_malformed() -> None:
    """A SearchGateDecision built with bad field values is malformed; its valid strings are still copied."""
    gate = SearchGateDecision(
        "gate-x", "search_gate.v1", 42, "Eligible", "eligible_missing_role", None, 5, ("nope",)  # type: ignore[arg-type]
    )
    decision = decide(gate)
    assert decision.reason_code == "malformed_gate_decision"
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == (
        "gate-x",
        "search_gate.v1",
        "",
    )
    assert decision.evidence_spans == ()
    assert_consistent(decision)


class Exploding(Exception):
    """Raised by the hostile mappings below."""


class HostileMapping(Mapping[str, Any]):
    """A mapping that raises from the method named `fails`, and otherwise serves a valid gate."""

    def __init__(self, fails: str, data: dict[str, Any] | None = None) -> None:
        self._fails = fails
        self._data = make_gate() if data is None else data

    def _maybe_fail(self, name: str) -> None:
        if self._fails == name:
            raise Exploding(name)

    def __getitem__(self, key: str) -> Any:
        self._maybe_fail("__getitem__")
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        self._maybe_fail("__iter__")
        return iter(self._data)

    def __len__(self) -> int:
        self._maybe_fail("__len__")
        return len(self._data)

    def keys(self) -> Any:
        """Keys, unless told to fail."""
        self._maybe_fail("keys")
        return self._data.keys()

    def get(self, key: str, default: Any = None) -> Any:
        """Lookup, unless told to fail."""
        self._maybe_fail("get")
        return self._data.get(key, default)


class RaisingStr(str):
    """A str subclass whose own methods raise."""

    def isascii(self) -> bool:
        """Raises."""
        raise Exploding("isascii")

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        """Raises."""
        raise Exploding("encode")

    def __hash__(self) -> int:
        """Raises."""
        raise Exploding("hash")


class LyingStr(str):
    """A str subclass that claims to be ASCII (and so valid text) whatever it holds."""

    def isascii(self) -> bool:
        """Lies."""
        return True


class RaisingList(list[Any]):
    """A list whose iteration raises."""

    def __iter__(self) -> Iterator[Any]:
        raise Exploding("iter")


MALFORMED = "malformed_gate_decision"
ALLOWED = "eligible_missing_role"


@pytest.mark.parametrize(
    ("gate", "reason"),
    [
        *[pytest.param(HostileMapping(name), MALFORMED, id=f"mapping-{name}-raises")
          for name in ("__getitem__", "__len__", "keys")],
        # check_gate never iterates a gate or calls its get(): a mapping failing only there is still read whole.
        *[pytest.param(HostileMapping(name), ALLOWED, id=f"mapping-{name}-raises") for name in ("__iter__", "get")],
        pytest.param(HostileMapping("get", make_gate(extra=1)), MALFORMED, id="malformed-and-get-raises"),
        pytest.param(HostileMapping("__iter__", make_gate(extra=1)), MALFORMED, id="malformed-and-iter-raises"),
        # A str subclass is read as its plain text, so its own (raising) methods are never called.
        pytest.param(make_gate(decision_id=RaisingStr("x")), ALLOWED, id="str-subclass-raises"),
        pytest.param(make_gate(decision_id=RaisingStr("x"), status=5), MALFORMED,
                     id="str-subclass-raises-in-malformed-copy"),
        pytest.param(make_gate(input_digest=LyingStr("\ud800"), status=5), MALFORMED,
                     id="str-subclass-lies-about-surrogate"),
        pytest.param(make_gate(decision_id=LyingStr("\udc00")), MALFORMED, id="str-subclass-lies-well-formed-path"),
        pytest.param(make_gate(status=RaisingStr("eligible")), MALFORMED, id="status-hash-raises"),
        pytest.param(make_gate(residual_ids=RaisingList(["a"])), MALFORMED, id="list-iteration-raises"),
        pytest.param(make_gate(evidence_spans=RaisingList([])), MALFORMED, id="spans-iteration-raises"),
        pytest.param(make_gate(evidence_spans=[HostileMapping("__getitem__", {
            "text": "t", "start": 0, "end": 1, "sentence_index": 0})]), MALFORMED, id="span-mapping-raises"),
        pytest.param({"decision_id": RaisingStr("x")}, MALFORMED, id="tiny-dict-raising-str"),
    ],
)
def test_decide_never_raises_on_hostile_input(gate: object, reason: str) -> None:
    """Hostile mappings and str subclasses never make decide raise; what cannot be read is malformed."""
    decision = decide(gate)
    assert decision.reason_code == reason
    assert decision.gate_decision_id in ("", "gate-0001", "x")
    assert type(decision.gate_decision_id) is str
    assert_consistent(decision)


def test_deep_recursion_is_malformed_not_a_crash() -> None:
    """A self-referencing gate value is still decided (the structure is just malformed)."""
    loop: list[Any] = []
    loop.append(loop)
    decision = decide(make_gate(residual_ids=loop))
    assert decision.reason_code == "malformed_gate_decision"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.json_values)
def test_decide_is_total_over_json_like_values(value: Any) -> None:
    """decide returns a consistent decision for any JSON-like value, lone surrogates included."""
    assert_consistent(decide(value))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.near_valid_gates())
def test_decide_is_total_over_near_valid_gates(gate: Any) -> None:
    """decide returns a consistent decision for valid gates with one to three mutations."""
    decision = decide(gate)
    assert_consistent(decision)
    if decision.reason_code == "malformed_gate_decision":
        assert decision.evidence_spans == ()


@settings(max_examples=200)
@given(strategies.gates())
def test_valid_gates_follow_the_table(gate: SearchGateDecision) -> None:
    """For any well-formed gate the decision is exactly the row spec 3.2 selects."""
    decision = decide(gate)
    assert_consistent(decision)
    assert decision.evidence_spans == gate.evidence_spans
    assert (decision.gate_decision_id, decision.gate_policy_version, decision.gate_input_digest) == (
        gate.decision_id,
        gate.policy_version,
        gate.input_digest,
    )
    if gate.status is not SearchGateStatus.ELIGIBLE:
        assert (decision.status, decision.reason_code) == (ComputeBudgetStatus.BUDGET_BLOCKED, f"gate_{gate.status}")
    elif gate.reason_code in V1.table:
        row = V1.table[gate.reason_code]
        assert decision.status is ComputeBudgetStatus.BUDGET_ALLOWED
        assert decision.reason_code == gate.reason_code
        assert limits(decision) == (row.max_candidates, row.max_depth, row.max_steps, row.max_parallelism)
    else:
        assert (decision.status, decision.reason_code) == (
            ComputeBudgetStatus.BUDGET_UNASSESSABLE,
            "unknown_gate_reason_code",
        )


@settings(max_examples=100)
@given(strategies.near_valid_gates())
def test_decide_is_deterministic(gate: Any) -> None:
    """Deciding the same gate twice gives equal decisions, explanation included."""
    assert decide(gate) == decide(gate)


def test_explanations_say_why() -> None:
    """Each explanation names the outcome, the gate's status or reason, and the limits granted or why none."""
    allowed = decide(make_gate(reason_code="eligible_missing_proposal")).explanation
    assert allowed.startswith("Allowed")
    assert "eligible_missing_proposal" in allowed
    assert all(str(number) in allowed for number in (3, 1, 5))
    blocked = decide(make_gate(status="ineligible", reason_code="no_residual")).explanation
    assert blocked.startswith("Blocked")
    assert "ineligible" in blocked
    assert "no_residual" in blocked
    unknown = decide(make_gate(reason_code="Eligible_Missing_Role")).explanation
    assert "Eligible_Missing_Role" in unknown
    assert "0" in unknown
    malformed = decide(make_gate(status="ELIGIBLE")).explanation
    assert "malformed" in malformed
    assert "ELIGIBLE" in malformed


def test_explanation_escapes_control_characters_in_reason_codes() -> None:
    """A reason code holding a newline cannot break the explanation into two lines."""
    explanation = decide(make_gate(reason_code="line1\nline2")).explanation
    assert "\n" not in explanation
    assert "line1\\nline2" in explanation


def test_explanation_is_not_hashed() -> None:
    """budget_id is the same for two gates whose decisions differ only in explanation text."""
    one = decide(make_gate(status="blocked", reason_code="a"))
    two = decide(make_gate(status="blocked", reason_code="b"))
    assert one.explanation != two.explanation
    assert one.budget_id == two.budget_id


def test_policy_registry() -> None:
    """POLICIES maps the v1 version string to V1, and policy_for looks it up."""
    assert POLICIES[COMPUTE_BUDGET_POLICY_VERSION] is V1
    assert policy_for("compute_budget.v1") is V1
    assert V1.version == "compute_budget.v1"


@pytest.mark.parametrize("version", ["compute_budget.v2", "compute_budget.V1", "", None, ["compute_budget.v1"]])
def test_policy_for_unknown_version(version: Any) -> None:
    """policy_for raises UnsupportedPolicyVersion for anything but a registered version."""
    with pytest.raises(UnsupportedPolicyVersion):
        policy_for(version)


def test_a_new_policy_is_just_a_new_table() -> None:
    """A BudgetTable with another version and table decides by its own table and stamps its own version."""
    v2 = BudgetTable(version="compute_budget.test_v2", table={"eligible_missing_role": Limits(9, 8, 7, 6)})
    decision = v2.decide(make_gate())
    assert decision.policy_version == "compute_budget.test_v2"
    assert limits(decision) == (9, 8, 7, 6)
    assert decision.budget_id == compute_budget_id(decision)
    assert decision.budget_id != decide(make_gate()).budget_id
    assert v2.decide(make_gate(reason_code="eligible_missing_proposal")).reason_code == "unknown_gate_reason_code"


def test_defect_makes_any_gate_malformed() -> None:
    """BudgetTable.decide with a rule-3.1.7 defect gives a malformed decision even for a valid gate value."""
    decision = V1.decide(make_gate(), defect="duplicate key 'status' in a JSON object")
    assert decision.reason_code == "malformed_gate_decision"
    assert decision.gate_decision_id == "gate-0001"
    assert decision.evidence_spans == ()
    assert "duplicate key" in decision.explanation


# Rule 3.1.8 (revision 2) for Python gates: measured without recursion, before anything is copied.


def nested(levels: int, leaf: Any = 1) -> Any:
    """`levels` lists, one inside the other, around `leaf`."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def test_mapping_nested_32_levels_copies_and_33_copies_nothing() -> None:
    """The gate is level 1: a value 31 lists deep makes 32 levels (copied as usual), 32 lists make 33."""
    at_limit = decide(make_gate(note=nested(31)))
    assert (at_limit.reason_code, at_limit.gate_decision_id) == (MALFORMED, "gate-0001")
    too_deep = decide(make_gate(note=nested(32)))
    assert too_deep.reason_code == MALFORMED
    assert (too_deep.gate_decision_id, too_deep.gate_policy_version, too_deep.gate_input_digest) == ("", "", "")
    assert "more than 32 levels deep" in too_deep.explanation
    assert_consistent(too_deep)


@pytest.mark.parametrize("depth", [5_000, 100_000])
@pytest.mark.parametrize("where", ["residual_ids", "evidence_spans", "note", "gate", "gate-instance", "tuple"])
def test_very_deep_python_gate_is_malformed_not_a_crash(depth: int, where: str) -> None:
    """5,000 and 100,000 levels, wherever they hang, decide to a malformed gate copying nothing."""
    gate: Any
    if where == "gate":
        gate = nested(depth)
    elif where == "gate-instance":
        gate = SearchGateDecision(**{**make_gate(), "residual_ids": nested(depth, "r")})
    elif where == "tuple":
        value: Any = "r"
        for _ in range(depth):
            value = (value,)
        gate = make_gate(residual_ids=value)
    else:
        gate = make_gate(**{where: nested(depth)})
    decision = decide(gate)
    assert decision.reason_code == MALFORMED
    assert decision.gate_decision_id == ""
    assert "more than 32 levels deep" in decision.explanation
    assert_consistent(decision)


def test_nesting_wins_over_other_defects() -> None:
    """A gate that is deep and wrong in other ways too copies nothing, as if depth were checked first."""
    decision = decide({"decision_id": "gate-0001", "status": 5, "x": [nested(40)]})
    assert (decision.gate_decision_id, decision.reason_code) == ("", MALFORMED)
    assert "more than 32 levels deep" in decision.explanation


def test_self_containing_mapping_is_too_deep() -> None:
    """A mapping that contains itself nests without end: malformed by rule 3.1.8, decided at once."""
    gate: dict[str, Any] = make_gate()
    gate["note"] = gate
    decision = decide(gate)
    assert (decision.gate_decision_id, decision.reason_code) == ("", MALFORMED)


def test_shared_parts_are_measured_once_per_level() -> None:
    """A value 31 levels deep whose every level holds the level below twice (2**31 paths) is measured quickly."""
    value: Any = 1
    for _ in range(30):
        value = [value, value]
    assert not nests_too_deep(make_gate(note=value))
    assert nests_too_deep(make_gate(note=[value, [value]]))
    assert decide(make_gate(note=value)).gate_decision_id == "gate-0001"


class MappingStr(str):
    """A str that is also a mapping, whose one value nests 40 levels: a leaf that still nests (rule 3.1.8)."""

    def values(self) -> Any:
        """One deeply nested value."""
        return [nested(40)]


Mapping.register(MappingStr)


def test_a_string_that_is_also_a_deep_mapping_is_too_deep() -> None:
    """Validation accepts a str subclass as text, but one that is also a deep mapping still nests too deeply."""
    assert isinstance(MappingStr("x"), Mapping)
    for gate in (make_gate(decision_id=MappingStr("gate-0001")), make_gate(residual_ids=[MappingStr("r")])):
        decision = decide(gate)
        assert (decision.gate_decision_id, decision.reason_code) == ("", MALFORMED)
    span = dict(make_gate()["evidence_spans"][0], text=MappingStr("the courier"))
    assert decide(make_gate(evidence_spans=[span])).reason_code == MALFORMED
