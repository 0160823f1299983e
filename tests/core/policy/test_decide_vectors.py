"""The golden vectors in tests/vectors/decide_v1.json: each gate text decides to exactly its recorded decision."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from compute_budget import ComputeBudgetDecision, compute_budget_id, decide, decide_json
from tests.conftest import REPO_ROOT
from tests.contract import HASHED_FIELDS

VECTORS_FILE = REPO_ROOT / "tests" / "vectors" / "decide_v1.json"
DOCUMENT: dict[str, Any] = json.loads(VECTORS_FILE.read_text(encoding="utf-8"))
VECTORS: list[dict[str, Any]] = DOCUMENT["vectors"]


def by_name(name: str) -> dict[str, Any]:
    """The vector called `name`."""
    return next(vector for vector in VECTORS if vector["name"] == name)


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vector_decides_exactly(vector: dict[str, Any]) -> None:
    """decide_json(gate text) gives exactly the recorded decision, every key and the explanation included."""
    assert decide_json(vector["gate"]).to_dict() == vector["decision"]


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vector_budget_id_is_independent_of_the_package(vector: dict[str, Any]) -> None:
    """The recorded budget_id is SHA-256 of rfc8785 (and of the stdlib sorted form) of the eleven recorded fields."""
    decision = vector["decision"]
    payload = {key: decision[key] for key in HASHED_FIELDS}
    stdlib = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert stdlib == rfc8785.dumps(payload)
    assert hashlib.sha256(stdlib).hexdigest() == decision["budget_id"]


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vector_decision_reads_back(vector: dict[str, Any]) -> None:
    """Each recorded decision reads back with from_dict, round-trips, and recomputes to its own budget_id."""
    decision = ComputeBudgetDecision.from_dict(vector["decision"])
    assert decision.to_dict() == vector["decision"]
    assert compute_budget_id(decision) == vector["decision"]["budget_id"]


def test_vectors_cover_every_row_and_rule() -> None:
    """The vectors cover every row of 3.2, every rule of 3.1, and the Unicode cases the issue names."""
    covers = " ".join(vector["covers"] for vector in VECTORS)
    for rule in ("3.1.1", "3.1.2", "3.1.3", "3.1.4", "3.1.5", "3.1.6", "3.1.7", "3.1.8"):
        assert rule in covers, rule
    outcomes = {(vector["decision"]["status"], vector["decision"]["reason_code"]) for vector in VECTORS}
    assert outcomes == {
        ("budget_allowed", "eligible_missing_role"),
        ("budget_allowed", "eligible_missing_relation"),
        ("budget_allowed", "eligible_missing_proposal"),
        ("budget_allowed", "eligible_target_unbound"),
        ("budget_blocked", "gate_ineligible"),
        ("budget_blocked", "gate_blocked"),
        ("budget_blocked", "gate_unassessable"),
        ("budget_unassessable", "unknown_gate_reason_code"),
        ("budget_unassessable", "malformed_gate_decision"),
    }
    texts = "".join(vector["gate"] for vector in VECTORS)
    for needle in ("\u0301", "\U0001f600", "\u2028", "\\u0000", "\\ud800", "Eligible_Missing_Role",
                   "eligible_missing_role \""):
        assert needle in texts, ascii(needle)


def test_vector_names_are_unique() -> None:
    """No two vectors share a name."""
    names = [vector["name"] for vector in VECTORS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("unicode-astral-raw", "unicode-astral-escaped"),
        ("unicode-line-separators-raw", "unicode-line-separators-escaped"),
        ("row-missing-role", "format-pretty-printed"),
        ("row-missing-role", "format-keys-reordered"),
    ],
)
def test_same_gate_written_differently_has_one_budget_id(one: str, other: str) -> None:
    """The same gate value written as different text (escapes, indentation, key order) has one budget_id."""
    assert by_name(one)["gate"] != by_name(other)["gate"]
    assert by_name(one)["decision"]["budget_id"] == by_name(other)["decision"]["budget_id"]


@pytest.mark.parametrize(
    ("one", "other"),
    [("unicode-combining-mark", "unicode-precomposed"), ("row-missing-role", "order-spans-reversed")],
)
def test_different_gates_have_different_budget_ids(one: str, other: str) -> None:
    """Canonically different gates (no Unicode normalisation, span order kept) have different budget_ids."""
    assert by_name(one)["decision"]["budget_id"] != by_name(other)["decision"]["budget_id"]


@pytest.mark.parametrize("name", ["rule-3.1.8-nested-32-levels", "rule-3.1.8-nested-33-levels"])
def test_nested_vectors_decide_alike_as_mappings(name: str) -> None:
    """Rule 3.1.8 holds for Python values too: the 32- and 33-level vector gates, as parsed mappings (33 levels
    is well within the parser's reach), decide to exactly the recorded decisions."""
    mapping = json.loads(by_name(name)["gate"])
    assert decide(mapping).to_dict() == by_name(name)["decision"]


def test_mapping_nested_100000_levels_decides_like_its_vector() -> None:
    """A mapping nested 100,000 levels deep (built in Python: no parser can read the vector text into one)
    decides, without recursion, to exactly the 100,000-level vector's decision."""
    vector = by_name("rule-3.1.8-nested-100000-levels")
    head = json.loads(vector["gate"][: vector["gate"].index(', "note"')] + "}")
    note: Any = 1
    for _ in range(100_000 - 1):
        note = [note]
    assert decide({**head, "note": note}).to_dict() == vector["decision"]


def test_cli_decides_every_vector(tmp_path: Path, run_cli: Any) -> None:
    """compute-budget decide over all vector gates, one per line, prints exactly the recorded decisions in order."""
    gates = tmp_path / "vectors.jsonl"
    gates.write_text("\n".join(vector["gate"] for vector in VECTORS) + "\n", encoding="utf-8")
    status, out, err = run_cli("decide", str(gates))
    assert (status, err) == (0, "")
    lines = out.split("\n")  # not splitlines(): U+2028 and U+0085 are raw inside JSON strings
    assert lines.pop() == ""
    assert [json.loads(line) for line in lines] == [vector["decision"] for vector in VECTORS]
