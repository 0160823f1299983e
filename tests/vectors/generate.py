"""Generate (or check) the golden vectors in decide_v1.json, tiles.json, tlog-proof.json (tlog_proof_vectors.py) and
mldsa-cosignature.json (mldsa_cosignature_vectors.py).

    python tests/vectors/generate.py           # check: exit 1 and show a diff if a file is not what the code gives
    python tests/vectors/generate.py --write   # regenerate: only after a deliberate, reviewed change

The file is the contract's memory: a vector that changes means `decide` or `budget_id` changed. Never regenerate
to make a failing test pass without reading the diff; see README.md in this folder.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import rfc8785

from compute_budget import decide_json
from compute_budget.core.log.entry_bundle import encode_bundle
from compute_budget.core.log.merkle import MemoryTree, leaf_hash
from compute_budget.core.log.tiles import TILE_WIDTH, Tile, new_tiles, tile_bytes, tile_hash, tiles_for_size

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable
from tests.contract import HASHED_FIELDS

HERE = Path(__file__).resolve().parent
VECTORS_FILE = HERE / "decide_v1.json"
TILES_FILE = HERE / "tiles.json"
SPAN_A = {"text": "the courier left", "start": 0, "end": 16, "sentence_index": 0}
SPAN_B = {"text": "before noon", "start": 17, "end": 28, "sentence_index": 0}


def gate(name: str, **changes: Any) -> dict[str, Any]:
    """A well-formed eligible gate whose decision_id is the vector's name, with `changes` applied."""
    value: dict[str, Any] = {
        "decision_id": f"v:{name}",
        "policy_version": "search_gate.v1",
        "input_digest": "sha256:5d41402abc4b2a76b9719d911017c592",
        "status": "eligible",
        "reason_code": "eligible_missing_role",
        "residual_ids": ["residual-17"],
        "candidate_organ": "frame_builder",
        "evidence_spans": [SPAN_A, SPAN_B],
    }
    value.update(changes)
    return value


def without(name: str, key: str) -> dict[str, Any]:
    """The vector's gate without `key`."""
    value = gate(name)
    del value[key]
    return value


def text(value: Any, *, ascii_only: bool = False) -> str:
    """Compact-ish, readable JSON text for a gate (one line)."""
    return json.dumps(value, ensure_ascii=ascii_only)


def spliced(name: str, placeholder_field: str, raw_json: str, **changes: Any) -> str:
    """Gate text whose `placeholder_field` holds `raw_json` verbatim (escapes, -0, 5.0 ... exactly as written);
    a field the gate does not have is added (an extra key, 3.1.1)."""
    return text(gate(name, **{placeholder_field: "@@RAW@@"}, **changes)).replace('"@@RAW@@"', raw_json, 1)


def span_spliced(name: str, span_field: str, raw_json: str) -> str:
    """Gate text whose only span has `span_field` written as `raw_json` verbatim."""
    span = dict(SPAN_A, **{span_field: "@@RAW@@"})
    return text(gate(name, evidence_spans=[span])).replace('"@@RAW@@"', raw_json, 1)


def vectors() -> list[tuple[str, str, str]]:
    """(name, what it covers, exact gate text) for every vector, in file order."""
    v: list[tuple[str, str, str]] = []

    def add(name: str, covers: str, gate_text: str | None = None, **changes: Any) -> None:
        v.append((name, covers, gate_text if gate_text is not None else text(gate(name, **changes))))

    # Spec 3.2, the table, row by row.
    add("row-missing-role", "3.2 row eligible_missing_role", reason_code="eligible_missing_role")
    add("row-missing-relation", "3.2 row eligible_missing_relation", reason_code="eligible_missing_relation")
    add("row-missing-proposal", "3.2 row eligible_missing_proposal", reason_code="eligible_missing_proposal")
    add("row-target-unbound", "3.2 row eligible_target_unbound", reason_code="eligible_target_unbound")
    add("row-no-spans", "3.2 allowed row with no evidence spans and no residuals", evidence_spans=[],
        residual_ids=[], candidate_organ=None)
    for status in ("ineligible", "blocked", "unassessable"):
        add(f"status-{status}", f"3.2 row status not eligible: {status} (spans still copied)", status=status,
            reason_code="no_residual")
    add("status-blocked-with-table-reason", "3.2 order: a non-eligible status wins over a table reason code",
        status="blocked", reason_code="eligible_missing_role")
    add("reason-unknown", "3.2 row eligible with an unknown reason", reason_code="eligible_please_search_forever")
    for name, reason in [
        ("reason-near-miss-capitalised", "Eligible_Missing_Role"),
        ("reason-near-miss-trailing-space", "eligible_missing_role "),
        ("reason-near-miss-leading-space", " eligible_missing_role"),
        ("reason-near-miss-upper", "ELIGIBLE_MISSING_ROLE"),
        ("reason-near-miss-zero-width-space", "eligible_missing_role\u200b"),
        ("reason-near-miss-accent", "eligible_missing_rol\u00e9"),
        ("reason-near-miss-newline", "eligible_missing_role\n"),
    ]:
        add(name, "3.2 row eligible with an unknown reason: near miss (case-sensitive, exact)", reason_code=reason)

    # Spec 3.1.1: exactly the eight keys, in a mapping.
    for key in ("decision_id", "status", "evidence_spans", "candidate_organ"):
        name = f"rule-3.1.1-missing-{key}"
        v.append((name, f"3.1.1 missing key {key}", text(without(name, key))))
    add("rule-3.1.1-extra-key", "3.1.1 extra key", note="x")
    name = "rule-3.1.1-key-wrong-case"
    wrong_case = without(name, "status")
    wrong_case["Status"] = "eligible"
    v.append((name, "3.1.1 key in the wrong case", text(wrong_case)))
    for name, literal in [
        ("rule-3.1.1-empty-object", "{}"),
        ("rule-3.1.1-array", "[]"),
        ("rule-3.1.1-number", "42"),
        ("rule-3.1.1-string", '"eligible"'),
        ("rule-3.1.1-null", "null"),
        ("rule-3.1.1-true", "true"),
    ]:
        v.append((name, "3.1.1 JSON that is not an object", literal))
    name = "rule-3.1.1-array-of-gate"
    v.append((name, "3.1.1 a gate wrapped in an array", text([gate(name)])))

    # Spec 3.1.2: the four identifying strings are non-empty strings.
    for key in ("decision_id", "policy_version", "input_digest", "reason_code"):
        add(f"rule-3.1.2-empty-{key}", f"3.1.2 empty {key} (copy rule: an empty string is copied as is)",
            **{key: ""})
    add("rule-3.1.2-decision_id-number", "3.1.2 decision_id not a string (copy rule: copied as empty)",
        decision_id=7)
    add("rule-3.1.2-input_digest-null", "3.1.2 input_digest null (copy rule: copied as empty)", input_digest=None)
    add("rule-3.1.2-reason_code-array", "3.1.2 reason_code not a string", reason_code=["eligible_missing_role"])

    # Spec 3.1.3: status exactly one of four values.
    for name, bad_status in [
        ("rule-3.1.3-status-upper", "ELIGIBLE"),
        ("rule-3.1.3-status-title", "Eligible"),
        ("rule-3.1.3-status-trailing-space", "eligible "),
        ("rule-3.1.3-status-budget-value", "budget_allowed"),
        ("rule-3.1.3-status-null", None),
        ("rule-3.1.3-status-number", 1),
    ]:
        add(name, "3.1.3 status not one of the four values", status=bad_status)

    # Spec 3.1.4: residual_ids a list of strings, candidate_organ a string or null.
    add("rule-3.1.4-residual_ids-string", "3.1.4 residual_ids a string", residual_ids="residual-17")
    add("rule-3.1.4-residual_ids-null", "3.1.4 residual_ids null", residual_ids=None)
    add("rule-3.1.4-residual-id-number", "3.1.4 a residual id not a string", residual_ids=["residual-17", 18])
    add("rule-3.1.4-candidate_organ-number", "3.1.4 candidate_organ a number", candidate_organ=5)
    add("rule-3.1.4-candidate_organ-array", "3.1.4 candidate_organ an array", candidate_organ=["frame_builder"])
    add("rule-3.1.4-candidate_organ-false", "3.1.4 candidate_organ false", candidate_organ=False)

    # Spec 3.1.5: evidence spans.
    add("rule-3.1.5-spans-object", "3.1.5 evidence_spans an object", evidence_spans=SPAN_A)
    add("rule-3.1.5-spans-null", "3.1.5 evidence_spans null", evidence_spans=None)
    add("rule-3.1.5-span-array", "3.1.5 a span that is an array", evidence_spans=[list(SPAN_A.values())])
    add("rule-3.1.5-span-missing-key", "3.1.5 a span without sentence_index",
        evidence_spans=[{"text": "x", "start": 0, "end": 1}])
    add("rule-3.1.5-span-extra-key", "3.1.5 a span with an extra key", evidence_spans=[dict(SPAN_A, note="x")])
    add("rule-3.1.5-span-text-number", "3.1.5 span text not a string", evidence_spans=[dict(SPAN_A, text=5)])
    for name, field, raw in [
        ("rule-3.1.5-start-true", "start", "true"),
        ("rule-3.1.5-end-false", "end", "false"),
        ("rule-3.1.5-start-5.0", "start", "5.0"),
        ("rule-3.1.5-end-1e1", "end", "1e1"),
        ("rule-3.1.5-sentence_index-string", "sentence_index", '"0"'),
        ("rule-3.1.5-sentence_index-null", "sentence_index", "null"),
        ("rule-3.1.5-start-negative", "start", "-1"),
        ("rule-3.1.5-end-2**53", "end", str(2**53)),
        ("rule-3.1.5-sentence_index-2**53", "sentence_index", str(2**53)),
        ("rule-3.1.5-start-huge", "start", "9" * 400),
    ]:
        shown = raw if len(raw) <= 20 else f"a {len(raw)}-digit integer"
        v.append((name, f"3.1.5 {field} written as {shown}", span_spliced(name, field, raw)))
    add("rule-3.1.5-end-before-start", "3.1.5 end < start",
        evidence_spans=[SPAN_A, {"text": "x", "start": 9, "end": 8, "sentence_index": 0}])
    add("valid-3.1.5-max-safe-integers", "3.1.5 boundary: 2**53 - 1 everywhere is well-formed",
        evidence_spans=[{"text": "far", "start": 2**53 - 1, "end": 2**53 - 1, "sentence_index": 2**53 - 1}])
    add("valid-3.1.5-empty-range", "3.1.5 boundary: start == end (and empty text) is well-formed",
        evidence_spans=[{"text": "", "start": 4, "end": 4, "sentence_index": 0}])
    name = "valid-3.1.5-minus-zero"
    v.append((name, "3.1.5 -0 is JSON integer syntax: read as 0, well-formed", span_spliced(name, "start", "-0")))

    # Spec 3.1.6: valid Unicode text everywhere (escaped lone surrogates are JSON, but not text).
    for name, field, raw, what in [
        ("rule-3.1.6-decision_id-high-surrogate", "decision_id", '"gate-\\ud800"', "(copy rule: copied as empty)"),
        ("rule-3.1.6-input_digest-low-surrogate", "input_digest", '"\\udc00"', "(copy rule: copied as empty)"),
        ("rule-3.1.6-reason_code-reversed-pair", "reason_code", '"\\ude00\\ud83d"', ""),
        ("rule-3.1.6-candidate_organ-surrogate", "candidate_organ", '"organ\\udfff"', ""),
        ("rule-3.1.6-residual-id-surrogate", "residual_ids", '["ok", "\\ud83d"]', ""),
    ]:
        v.append((name, f"3.1.6 lone surrogate in {field} {what}".strip(), spliced(name, field, raw)))
    name = "rule-3.1.6-span-text-surrogate"
    v.append((name, "3.1.6 lone surrogate in span text", span_spliced(name, "text", '"noon\\udbff"')))

    # Spec 3.1.7: duplicate keys in the text.
    base = text(gate("rule-3.1.7-duplicate-same-value"))
    v.append(("rule-3.1.7-duplicate-same-value", "3.1.7 duplicate top-level key with the same value",
              base.replace('"status": "eligible"', '"status": "eligible", "status": "eligible"', 1)))
    name = "rule-3.1.7-duplicate-decision_id"
    v.append((name, "3.1.7 duplicate decision_id with different values (spec 3.2 revision 2: a key repeated in "
              "the top-level object is copied as empty, neither its first nor its last value)",
              text(gate(name)).replace('"decision_id": ', f'"decision_id": "v:{name}:first", "decision_id": ', 1)))
    name = "rule-3.1.7-duplicate-in-span"
    v.append((name, "3.1.7 duplicate key inside a span",
              text(gate(name)).replace('"start": 0', '"start": 0, "start": 0', 1)))
    name = "rule-3.1.7-duplicate-in-extra-value"
    v.append((name, "3.1.7 duplicate key nested in a non-gate value (also 3.1.1 extra key)",
              text(gate(name, note={"k": 1})).replace('"k": 1', '"k": 1, "k": 2', 1)))

    # Spec 3.2 revision 2: a key repeated in the top-level object copies as "", one repeated elsewhere does not.
    name = "rev2-3.2-repeated-decision_id-same-value"
    v.append((name, "3.2 revision 2: a top-level decision_id repeated with the same value is still copied as empty",
              text(gate(name)).replace('"decision_id": ', f'"decision_id": "v:{name}", "decision_id": ', 1)))
    name = "rev2-3.2-repeated-input_digest"
    v.append((name, "3.2 revision 2: a repeated top-level input_digest is copied as empty, the other ids as usual",
              text(gate(name)).replace('"input_digest": ', '"input_digest": "sha256:first", "input_digest": ', 1)))
    name = "rev2-3.2-decision_id-repeated-inside-a-span"
    v.append((name, "3.2 revision 2: decision_id repeated inside a span (3.1.7) but once at the top level: copied",
              text(gate(name)).replace('"start": 0', '"decision_id": "a", "decision_id": "b", "start": 0', 1)))

    # Spec 3.1.8 (revision 2): arrays and objects nest at most 32 levels, the gate itself being level 1.
    def nested_note(name: str, levels: int, inner: str = "1") -> str:
        return spliced(name, "note", "[" * (levels - 1) + inner + "]" * (levels - 1))

    v.append(("rule-3.1.8-nested-32-levels", "3.1.8 boundary: nested exactly 32 levels deep (malformed only by its "
              "extra key, 3.1.1: ids copied)", nested_note("rule-3.1.8-nested-32-levels", 32)))
    v.append(("rule-3.1.8-nested-33-levels", "3.1.8 nested 33 levels deep: malformed, nothing copied",
              nested_note("rule-3.1.8-nested-33-levels", 33)))
    v.append(("rule-3.1.8-nested-33-levels-not-json-inside", "3.1.8 nested 33 levels deep and not JSON inside: "
              "the depth decides first, malformed, nothing copied",
              nested_note("rule-3.1.8-nested-33-levels-not-json-inside", 33, "nope, ,")))
    v.append(("rule-3.1.8-nested-100000-levels", "3.1.8 nested 100,000 levels deep: decided without recursion, "
              "malformed, nothing copied", nested_note("rule-3.1.8-nested-100000-levels", 100_000)))
    add("rule-3.1.8-brackets-in-strings", "3.1.8 brackets inside strings (escaped quotes too) do not nest: "
        "well-formed", decision_id='v:[{"' + "[" * 40 + "{" * 40, evidence_spans=[dict(SPAN_A, text="]" * 50)])

    # Copy rule for malformed gates with valid non-ASCII identifying strings.
    add("copy-unicode-ids-of-malformed", "3.2 copy rule: valid non-ASCII strings of a malformed gate are copied",
        decision_id="v:copy-\u00e9-\U0001f600-e\u0301", policy_version="gate\u2028v1", status="ELIGIBLE")

    # Unicode text in well-formed gates.
    def span_text(s: str) -> list[dict[str, Any]]:
        return [{"text": s, "start": 0, "end": len(s), "sentence_index": 0}]

    # Pairs share a decision_id, so their budget_ids can be compared directly.
    add("unicode-combining-mark", "Unicode: combining mark (e + U+0301), not normalised (compare precomposed)",
        decision_id="v:unicode-e-acute", evidence_spans=span_text("Zoe\u0301 gave it"))
    add("unicode-precomposed", "Unicode: precomposed U+00E9 (differs from the combining form)",
        decision_id="v:unicode-e-acute", evidence_spans=span_text("Zo\u00e9 gave it"))
    astral = gate("unicode-astral", evidence_spans=span_text("\U0001f600 \U00010348"))
    v.append(("unicode-astral-raw", "Unicode: astral characters written raw", text(astral)))
    v.append(("unicode-astral-escaped", "Unicode: the same astral characters as escaped surrogate pairs "
              "(same budget_id as unicode-astral-raw)", text(astral, ascii_only=True)))
    add("unicode-control-characters", "Unicode: control characters U+0000, U+001F, tab, newline, DEL",
        evidence_spans=span_text("a\u0000b\u001fc\td\ne\u007f"))
    separators = gate("unicode-line-separators", evidence_spans=span_text("one\u2028two\u2029three"))
    v.append(("unicode-line-separators-raw", "Unicode: U+2028 and U+2029 written raw", text(separators)))
    v.append(("unicode-line-separators-escaped", "Unicode: U+2028 and U+2029 written as escapes "
              "(same budget_id as unicode-line-separators-raw)", text(separators, ascii_only=True)))
    add("unicode-bom-and-nonchars", "Unicode: U+FEFF inside a string, noncharacters U+FFFF and U+10FFFF",
        evidence_spans=span_text("\ufeffx\uffff\U0010ffff"))
    add("unicode-rtl-and-cjk", "Unicode: right-to-left and CJK text in ids and spans",
        decision_id="v:\u05e9\u05dc\u05d5\u05dd-\u0645\u0631\u062d\u0628\u0627-\u4f60\u597d",
        evidence_spans=span_text("\u4f60\u597d\uff0c\u4e16\u754c"))

    # Formatting and key order do not matter; span order does (all three share row-missing-role's decision_id).
    row = gate("row-missing-role")
    v.append(("format-pretty-printed", "formatting: a multi-line, indented gate (same budget_id as "
              "row-missing-role)", json.dumps(row, indent=2, ensure_ascii=False)))
    v.append(("format-keys-reordered", "formatting: key order does not matter (same budget_id as "
              "row-missing-role)", json.dumps(row, sort_keys=True)))
    v.append(("order-spans-reversed", "evidence_spans order is kept and hashed (differs from row-missing-role)",
              text(dict(row, evidence_spans=[SPAN_B, SPAN_A]))))
    return v


def build() -> dict[str, Any]:
    """Decide every vector with the code under test and check each budget_id against two independent recipes."""
    entries = []
    names: set[str] = set()
    for name, covers, gate_text in vectors():
        assert name not in names, name
        names.add(name)
        decision = decide_json(gate_text).to_dict()
        payload = {key: decision[key] for key in HASHED_FIELDS}
        stdlib = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        assert stdlib == rfc8785.dumps(payload), name
        assert hashlib.sha256(stdlib).hexdigest() == decision["budget_id"], name
        entries.append({"name": name, "covers": covers, "gate": gate_text, "decision": decision})
    return {
        "about": "Golden vectors for compute_budget.v1 decide (spec sections 3.1-3.3). 'gate' is the exact gate "
        "text fed to decide_json; 'decision' is the exact JSON form it must produce. See README.md.",
        "policy_version": "compute_budget.v1",
        "vectors": entries,
    }


def render(document: dict[str, Any]) -> str:
    """The file's text: indented, every non-ASCII character escaped so it can be read by eye."""
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"


# Tile vectors (spec section 10, C2SP tlog-tiles): paths, and the tiles and bundles of trees built here.
TILE_PATHS = [  # (level, index, width): Go's and C2SP's examples, then the edges of the 3-digit groups
    (4, 1234067, 256), (4, 1234067, 1), (4, 1234067, 8), (0, 123456789, 256), (0, 0, 256), (0, 0, 1),
    (0, 999, 255), (0, 1000, 256), (1, 1000000, 17), (2, 0, 1), (63, 0, 1), (7, 0, 256), (6, 255, 256),
]
BAD_TILE_PATHS = [
    "tile/0/1", "tile/0/0001", "tile/00/000", "tile/01/000", "tile/64/000", "tile/100/000", "tile/-1/000",
    "tile/0/x000/001", "tile/0/x001", "tile/0/001/002", "tile/0/x1000/000", "tile/0/000.p/256", "tile/0/000.p/0",
    "tile/0/000.p/012", "tile/0/000.p/", "tile/0/000.p/1/", "tile/0/000.p/1000", "/tile/0/000", "tile/0/000/",
    "tile/0/000 ", "tile/0/000\n", "TILE/0/000", "tile/0/\u0660\u0660\u0660", "tile/8/0/000", "tile/data/000",
    "tile/entries/000", "tile/7/001", "tile/63/001", "tile/0/+01", "tile/0/000.p/+1", "tile//000", "",
]
BAD_BUNDLE_PATHS = [
    "tile/entries/000.p/256", "tile/entries/x000/000", "tile/entries/0/000", "tile/0/000", "tile/entries/1",
    "tile/entries/000.p/0", "tile/entries/000/", "tile/entries/x001", "tile/entries/x072/057/600",
]
LARGE_SIZE = 70_000
LARGE_SIZES = [255, 256, 257, 511, 512, 65535, 65536, 65537, LARGE_SIZE]
NEW_TILES_PAIRS = [(0, 1), (1, 1), (1, 2), (255, 256), (256, 257), (257, 600), (65400, 65536), (65536, LARGE_SIZE)]


def large_leaf(index: int) -> bytes:
    """The leaf input `index` of the large vector tree: ASCII ``leaf <index>``."""
    return b"leaf %d" % index


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tiles_of(tree: MemoryTree, leaves: list[bytes], size: int, *, full_bytes: bool) -> dict[str, Any]:
    """Root, tile paths, and the partial tiles and bundles (bytes in hex, or their SHA-256) of the first `size`."""
    shown = (lambda data: data.hex()) if full_bytes else _sha
    tiles = tiles_for_size(size)
    partial = [tile for tile in tiles if tile.partial or full_bytes]
    return {
        "size": size,
        "root": tree.root(size).hex(),
        "tiles": [tile.path for tile in tiles],
        "tile_bytes": {tile.path: shown(tile_bytes(tree, tile)) for tile in partial},
        "bundle_bytes": {
            tile.bundle_path: shown(encode_bundle(tile, leaves[tile.first_node : tile.first_node + tile.width]))
            for tile in partial if tile.level == 0
        },
    }


def build_tiles() -> dict[str, Any]:
    """The tile vectors: paths, the RFC 6962 leaves' trees tile by tile, and a 70,000-leaf tree's tiles."""
    rfc = json.loads((HERE / "rfc6962.json").read_text(encoding="utf-8"))
    rfc_leaves = [bytes.fromhex(item) for item in rfc["leaves_hex"]]
    rfc_tree = MemoryTree.from_leaves(rfc_leaves)
    assert [rfc_tree.root(size).hex() for size in range(1, 9)] == rfc["roots_hex"][1:9]
    leaves = [large_leaf(index) for index in range(LARGE_SIZE)]
    tree = MemoryTree(leaf_hash(leaf) for leaf in leaves)
    full = [tile for tile in tiles_for_size(LARGE_SIZE) if not tile.partial]
    return {
        "about": "Golden vectors for C2SP tlog-tiles (spec section 10): tile paths, hash tiles and entry bundles "
        "of RFC 6962 trees. Made by generate.py from the code and rfc6962.json; see README.md.",
        "tile_height": 8,
        "paths": [
            {"level": level, "index": index, "width": width, "path": Tile(level, index, width).path,
             "bundle_path": Tile(level, index, width).bundle_path if level == 0 else None}
            for level, index, width in TILE_PATHS
        ],
        "bad_tile_paths": BAD_TILE_PATHS,
        "bad_bundle_paths": BAD_BUNDLE_PATHS,
        "rfc6962_trees": [_tiles_of(rfc_tree, rfc_leaves, size, full_bytes=True) for size in range(9)],
        "large_tree": {
            "leaf": "ASCII 'leaf <index>', index 0-based in decimal",
            "size": LARGE_SIZE,
            "full_tiles": {tile.path: {"sha256": _sha(tile_bytes(tree, tile)),
                                       "hash": tile_hash(tile, tile_bytes(tree, tile)).hex()} for tile in full},
            "full_bundles": {
                tile.bundle_path: _sha(encode_bundle(tile, leaves[tile.first_node : tile.first_node + TILE_WIDTH]))
                for tile in full if tile.level == 0
            },
            "sizes": [_tiles_of(tree, leaves, size, full_bytes=False) for size in LARGE_SIZES],
        },
        "new_tiles": [
            {"old_size": old, "new_size": new, "tiles": [tile.path for tile in new_tiles(old, new)]}
            for old, new in NEW_TILES_PAIRS
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """Check the vectors files against the code (default) or rewrite them (--write)."""
    from tests.vectors import mldsa_cosignature_vectors, tlog_proof_vectors

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="rewrite the vectors files from the code")
    args = parser.parse_args(argv)
    files = [
        (VECTORS_FILE, render(build())),
        (TILES_FILE, render(build_tiles())),
        (tlog_proof_vectors.TLOG_PROOF_FILE, tlog_proof_vectors.render(tlog_proof_vectors.build())),
        # ML-DSA signing is hedged: the committed signature lines are kept while they verify (see the module).
        (mldsa_cosignature_vectors.MLDSA_FILE,
         mldsa_cosignature_vectors.render(mldsa_cosignature_vectors.build(mldsa_cosignature_vectors.committed()))),
    ]
    return max(_write_or_check(path, fresh, write=args.write) for path, fresh in files)


def _write_or_check(path: Path, fresh: str, *, write: bool) -> int:
    """Write `fresh` to `path`, or check the file holds it (0), else show the difference (1)."""
    if write:
        path.write_text(fresh, encoding="utf-8")
        print(f"wrote {path} ({fresh.count(chr(10))} lines)")
        return 0
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if current == fresh:
        print(f"{path.name} matches the code")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), "committed", "regenerated")
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
