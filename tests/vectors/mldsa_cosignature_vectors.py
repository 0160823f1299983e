"""The ML-DSA-44 cosignature vectors (mldsa-cosignature.json), made here from a fixed seed: C2SP publishes none.
`generate.py` writes and checks them.

ML-DSA-44 signing in `cryptography` is hedged (randomized), so signature bytes cannot be reproduced. Everything
else is deterministic and reproduced byte for byte: the key ID, both key texts, the public key, every
``subtree/v1`` message. Each signature line was made once (`generate.py --write`); a later run keeps the committed
line when it still verifies under the vector key and message, and signs afresh only when it does not (so a check
run compares the file exactly, and a code change that breaks verification shows as a diff).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from compute_budget.core.log.cosignature import WitnessSigner, valid_cosignatures
from compute_budget.core.log.mldsa_cosignature import (
    ALGORITHM_MLDSA44_COSIGNATURE,
    checkpoint_message,
    subtree_message,
)
from compute_budget.core.log.note import Signature

HERE = Path(__file__).resolve().parent
MLDSA_FILE = HERE / "mldsa-cosignature.json"
C2SP_VERSION = (
    "C2SP/C2SP tlog-cosignature.md at commit 01194db11950a0ae2b2b2401afa0a4063a822458, signed-note.md at commit "
    "055287621bf3cd13ff4394418a3e8efc2d5e8ed7"
)
SIGNER = WitnessSigner.from_seed("witness.example/pq1", bytes(range(32)), ALGORITHM_MLDSA44_COSIGNATURE)
ROOT = base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
PLAIN = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
WITH_CHAIN = PLAIN + "chain " + "ab" * 32 + "\n"
OTHER_CHAIN = PLAIN + "chain " + "cd" * 32 + "\n"
OTHER_ROOT = "example.com/behind-the-sofa\n20852163\n" + base64.b64encode(bytes(32)).decode() + "\n"
TIMESTAMP = 1679315147

# (name, checkpoint text, timestamp, texts with other extension lines the same line must verify on)
COSIGNATURES = [
    ("checkpoint-with-extension", WITH_CHAIN, TIMESTAMP, [PLAIN, OTHER_CHAIN]),
    ("plain-checkpoint", PLAIN, TIMESTAMP, [WITH_CHAIN]),
    ("timestamp-zero", WITH_CHAIN, 0, [PLAIN]),
]
# (cosigner, timestamp, origin, start, end, hash): encodings of C2SP's cosigned_message, signed or not
SUBTREES = [
    ("witness.example/pq1", TIMESTAMP, "example.com/behind-the-sofa", 0, 20852163, ROOT),
    ("witness.example/pq1", 0, "example.com/behind-the-sofa", 0, 20852163, ROOT),
    ("witness.example/pq1", 0, "example.com/behind-the-sofa", 256, 512, bytes(range(32))),
    ("w", 2**63 - 1, "o", 0, 2**64 - 1, bytes(32)),
]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _line(text: str, timestamp: int, previous: dict[str, str]) -> str:
    """The committed line for (text, timestamp) when it still verifies, else a fresh signature's line."""
    kept = previous.get(f"{timestamp}\n{text}")
    if kept is not None and _verifies(text, kept, timestamp):
        return kept
    return SIGNER.cosign(text, timestamp).line()


def _verifies(text: str, line: str, timestamp: int) -> bool:
    found = valid_cosignatures(text + "\n" + line, [SIGNER.verifier()], now=TIMESTAMP + 1)
    return [item.timestamp for item in found] == [timestamp]


def _previous_lines(previous: dict[str, Any] | None) -> dict[str, str]:
    """(timestamp, text) -> signature line of the committed file, to keep hedged signatures stable."""
    if not previous:
        return {}
    return {f"{item['timestamp']}\n{item['checkpoint_text']}": item["cosignature_line"]
            for item in previous.get("cosignatures", [])}


def _spoiled(line: str, index: int) -> str:
    """`line` with one byte of its decoded signature (key ID, timestamp, signature) flipped."""
    prefix, encoded = line.rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(encoded))
    raw[index] ^= 0x01
    return f"{prefix} {_b64(bytes(raw))}\n"


def must_not_verify(line: str) -> dict[str, Any]:
    """Lines that must not count as cosignatures of `WITH_CHAIN` by the vector key, each spoiled one way."""
    ed25519_collision = Signature(SIGNER.name, SIGNER.key_id, TIMESTAMP.to_bytes(8, "big") + bytes(64)).line()
    return {
        "flipped_key_id_byte": _spoiled(line, 0),
        "flipped_timestamp_byte": _spoiled(line, 11),
        "flipped_signature_first_byte": _spoiled(line, 12),
        "flipped_signature_last_byte": _spoiled(line, -1),
        "ed25519_sized_line_under_this_name_and_key_id": ed25519_collision,
        "truncated_signature": Signature(SIGNER.name, SIGNER.key_id, base64.b64decode(line.split()[-1])[4:-1]).line(),
        "other_root": {"checkpoint_text": OTHER_ROOT, "cosignature_line": line},
    }


def bad_keys() -> dict[str, str]:
    """Verifier key texts that must be refused, each wrong one way."""
    public = SIGNER.verifier().public_key
    key_id = f"{SIGNER.key_id:08x}"
    return {
        "type_0x04_with_an_ml_dsa_key": f"{SIGNER.name}+{key_id}+{_b64(bytes([0x04]) + public)}",
        "type_0x01_with_an_ml_dsa_key": f"{SIGNER.name}+{key_id}+{_b64(bytes([0x01]) + public)}",
        "truncated_public_key": f"{SIGNER.name}+{key_id}+{_b64(bytes([0x06]) + public[:-1])}",
        "key_id_of_another_name": f"witness.example/pq2+{key_id}+{_b64(bytes([0x06]) + public)}",
        "key_id_of_type_0x04": (
            f"{SIGNER.name}+{_ed25519_style_id(public)}+{_b64(bytes([0x06]) + public)}"
        ),
    }


def _ed25519_style_id(public: bytes) -> str:
    """The key ID the same name and key would have with type byte 0x04: not this key's."""
    return hashlib.sha256(SIGNER.name.encode() + b"\n\x04" + public).digest()[:4].hex()


def build(previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole vectors document; `previous` (the committed one) supplies the hedged signature lines to keep."""
    lines = _previous_lines(previous)
    cosignatures = []
    for name, text, timestamp, also in COSIGNATURES:
        line = _line(text, timestamp, lines)
        cosignatures.append({
            "name": name, "checkpoint_text": text, "timestamp": timestamp,
            "message_hex": checkpoint_message(SIGNER.name, text, timestamp).hex(),
            "cosignature_line": line, "also_verifies_on": also,
        })
    return {
        "about": "C2SP tlog-cosignature ML-DSA-44 (type 0x06, subtree/v1) vectors made by this project from a fixed "
        "seed (C2SP publishes none): tests/vectors/generate.py. ML-DSA signing is hedged, so signature lines are "
        "checked by verifying them, not by reproducing them; every other field is deterministic. See README.md.",
        "c2sp": C2SP_VERSION,
        "seed_hex": bytes(range(32)).hex(),
        "name": SIGNER.name,
        "public_key_hex": SIGNER.verifier().public_key.hex(),
        "key_id_hex": f"{SIGNER.key_id:08x}",
        "verifier_key": SIGNER.verifier().format(),
        "signer_key": SIGNER.format(),
        "cosignatures": cosignatures,
        "subtree_messages": [
            {"cosigner": c, "timestamp": t, "origin": o, "start": s, "end": e, "hash_hex": h.hex(),
             "message_hex": subtree_message(c, t, o, s, e, h).hex()}
            for c, t, o, s, e, h in SUBTREES
        ],
        "must_not_verify": must_not_verify(cosignatures[0]["cosignature_line"]),
        "bad_verifier_keys": bad_keys(),
    }


def committed() -> dict[str, Any] | None:
    """The committed document, or None when there is none yet."""
    return json.loads(MLDSA_FILE.read_text(encoding="utf-8")) if MLDSA_FILE.exists() else None


def render(document: dict[str, Any]) -> str:
    """The file's text: indented, ASCII only (the em dash of signature lines escaped)."""
    return json.dumps(document, indent=2, ensure_ascii=True) + "\n"
