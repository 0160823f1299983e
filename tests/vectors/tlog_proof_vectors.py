"""The C2SP tlog-proof vectors (tlog-proof.json), built from fixed keys; `generate.py` writes and checks them.

Three parts, all reproducible (Ed25519 signatures are deterministic):

- ``rfc6962``: for every tree size 1..8 of the RFC 6962 vectors (rfc6962.json) and every index below it, the
  tlog-proof of that leaf, its data as ``extra``, against a plain C2SP checkpoint (origin, size, root) signed by
  the vector key;
- ``receipts``: a three-row log of this project (fixed gates and recording time), each row's receipt as
  `prove --format tlog-proof` prints it, and the line `verify-proof` gives;
- ``malformed``: proofs that break the format one way each, and the one-line error each must give.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from compute_budget import decide
from compute_budget.core.chain import chain_hash
from compute_budget.core.leaf import leaf_input
from compute_budget.core.log.head import GENESIS_CHAIN_HASH
from compute_budget.core.log.merkle import MemoryTree, inclusion_proof
from compute_budget.core.log.note import SignerKey, format_checkpoint, sign_note
from compute_budget.core.log.tlog_proof import TlogProof
from compute_budget.core.receipts import verify_proof
from compute_budget.core.row import chained_row
from compute_budget.errors import MalformedProof

HERE = Path(__file__).resolve().parent
TLOG_PROOF_FILE = HERE / "tlog-proof.json"
C2SP_VERSION = "C2SP/C2SP tlog-proof.md at commit 0065ea5b716154a2dd48508e3f905012a16ce5e9 (c2sp.org/tlog-proof@v1)"
SIGNER = SignerKey.from_seed("example.org/vectors", bytes(range(32)))
RECEIPT_ORIGIN = "example.org/receipts"
RECORDED_AT = "2026-01-01T00:00:00.000000Z"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def rfc6962_proofs() -> list[dict[str, Any]]:
    """One tlog-proof per (tree size, index) of the RFC 6962 vector leaves."""
    vectors = json.loads((HERE / "rfc6962.json").read_text(encoding="utf-8"))
    leaves = [bytes.fromhex(item) for item in vectors["leaves_hex"]]
    tree = MemoryTree.from_leaves(leaves)
    proofs = []
    for size in range(1, len(leaves) + 1):
        root = tree.root(size)
        assert root.hex() == vectors["roots_hex"][size]
        note = sign_note(f"example.org/rfc6962\n{size}\n{_b64(root)}\n", SIGNER)
        for index in range(size):
            path = tuple(inclusion_proof(tree, index, size))
            proof = TlogProof(index, path, note, leaves[index])
            proofs.append({"tree_size": size, "index": index, "proof": proof.encode()})
    return proofs


def receipt_log() -> tuple[list[tuple[Any, ...]], str]:
    """The three rows of the receipts' log (values in leaf order) and its head's chain hash."""
    rows: list[tuple[Any, ...]] = []
    chain = GENESIS_CHAIN_HASH
    for seq, status in enumerate(("eligible", "blocked", "eligible"), 1):
        gate = {
            "decision_id": f"vector-{seq}", "policy_version": "search_gate.v1", "input_digest": "sha256:0a1b",
            "status": status, "reason_code": "eligible_missing_role", "residual_ids": [f"residual-{seq}"],
            "candidate_organ": "frame_builder",
            "evidence_spans": [{"text": "the courier left", "start": 0, "end": 16, "sentence_index": 0}],
        }
        values = chained_row(seq, decide(gate), json.dumps(gate), RECORDED_AT)
        chain = chain_hash(chain, values)
        rows.append(values)
    return rows, chain


def receipts() -> list[dict[str, Any]]:
    """Each row of the receipts' log as a tlog-proof, with the line verify-proof prints for it."""
    rows, chain = receipt_log()
    tree = MemoryTree.from_leaves(leaf_input(values) for values in rows)
    note = sign_note(format_checkpoint(RECEIPT_ORIGIN, len(rows), tree.root(), chain), SIGNER)
    found = []
    for values in rows:
        seq = values[0]
        proof = TlogProof(seq - 1, tuple(inclusion_proof(tree, seq - 1, len(rows))), note, leaf_input(values))
        outcome = verify_proof(proof.encode(), [SIGNER.verifier()], origin=RECEIPT_ORIGIN)
        assert outcome.valid, outcome.message
        found.append({"seq": seq, "budget_id": values[1], "proof": proof.encode(), "verified": outcome.message})
    return found


def malformed(good: str) -> list[dict[str, Any]]:
    """Proofs spoiled one way each from the `good` one, with the error message each gives."""
    head, _, rest = good.partition("\n")
    extra_line, _, rest = rest.partition("\n")
    index_line, _, rest = rest.partition("\n")
    first_hash, _, after_hash = rest.partition("\n")
    hashes, _, checkpoint = rest.partition("\n\n")
    text, _, signatures = checkpoint.partition("\n\n")
    cases = {
        "wrong-header": good.replace(head, "c2sp.org/tlog-proof@v2", 1),
        "header-with-crlf": good.replace(head + "\n", head + "\r\n", 1),
        "extra-not-base64": good.replace(extra_line, "extra !!not base64!!", 1),
        "extra-stray-bits": good.replace(extra_line, "extra QR==", 1),
        "index-missing": good.replace(index_line + "\n", "", 1),
        "index-leading-zero": good.replace(index_line, "index 01", 1),
        "index-negative": good.replace(index_line, "index -1", 1),
        "index-after-hashes": f"{head}\n{extra_line}\n{first_hash}\n{index_line}\n{after_hash}",
        "hash-not-base64": good.replace(first_hash, "not a hash", 1),
        "hash-31-bytes": good.replace(first_hash, _b64(bytes(31)), 1),
        "hash-stray-bits": good.replace(first_hash, first_hash[:42] + "B=", 1),
        "too-many-hashes": good.replace(first_hash, "\n".join([first_hash] * 65), 1),
        "missing-checkpoint": f"{head}\n{extra_line}\n{index_line}\n{hashes}\n",
        "missing-empty-line": f"{head}\n{extra_line}\n{index_line}\n{hashes}\n{checkpoint}",
        "checkpoint-unsigned": f"{head}\n{extra_line}\n{index_line}\n{hashes}\n\n{text}\n",
        "checkpoint-two-lines": good.replace(text, "\n".join(text.split("\n")[:2]), 1),
        "trailing-junk-line": good + "junk\n",
        "trailing-empty-line": good + "\n",
        "no-final-newline": good[:-1],
        "signature-not-base64": good.replace(signatures, signatures.split(" ")[0] + " " + signatures.split(" ")[1]
                                             + " !!\n", 1),
    }
    found = []
    for name, spoiled in cases.items():
        try:
            TlogProof.parse(spoiled)
        except MalformedProof as error:
            found.append({"name": name, "proof": spoiled, "error": str(error)})
            continue
        raise AssertionError(f"malformed vector {name} parses")  # pragma: no cover
    return found


def build() -> dict[str, Any]:
    """The whole vectors document."""
    made = receipts()
    return {
        "about": "C2SP tlog-proof vectors (spec 10.3), made by tests/vectors/generate.py from the fixed key below: "
        "'rfc6962' proofs of the RFC 6962 vector leaves (extra = the leaf data), 'receipts' of a three-row log of "
        "this project (extra = the row's leaf input) with the line verify-proof prints, and 'malformed' proofs "
        "with the one-line error each gives. See README.md.",
        "c2sp": C2SP_VERSION,
        "signer_key": SIGNER.format(),
        "verifier_key": SIGNER.verifier().format(),
        "receipt_origin": RECEIPT_ORIGIN,
        "rfc6962": rfc6962_proofs(),
        "receipts": made,
        "malformed": malformed(made[0]["proof"]),
    }


def render(document: dict[str, Any]) -> str:
    """The file's text: indented, ASCII only (the em dash of signature lines escaped)."""
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"
