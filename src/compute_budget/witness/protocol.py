"""C2SP tlog-witness's `add-checkpoint`, checked in the order spec 9.4 gives, and this project's `latest`.

`Witness.add_checkpoint(body)` returns the HTTP answer; the check and the update of the state are one
transaction, committed before the answer is returned. Time comes from the clock the witness is given.
"""

from __future__ import annotations

import base64
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from compute_budget.core.log.cosignature import WitnessSigner
from compute_budget.core.log.encoding import strict_b64decode
from compute_budget.core.log.merkle import verify_consistency
from compute_budget.core.log.note import (
    NoteVerification,
    ParsedNote,
    Signature,
    TlogCheckpoint,
    VerifierKey,
    parse_note,
    parse_tlog_checkpoint,
    verified_signatures,
    verify_note,
)
from compute_budget.errors import NoteError
from compute_budget.witness.state import (
    MAX_SIZE,
    Evidence,
    EvidenceLabel,
    Latest,
    Pending,
    WitnessState,
    base64_root,
    conflict,
    keep_evidence,
    keep_latest,
    keep_pending,
)

MAX_BODY_BYTES = 64 * 1024
MAX_PROOF_LINES = 63
TEXT = "text/plain; charset=utf-8"
SIZE_TYPE = "text/x.tlog.size"
_OLD_LINE = re.compile(r"old (0|[1-9][0-9]{0,19})")


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, body text and content type."""

    status: int
    body: str
    content_type: str = TEXT


@dataclass(frozen=True, slots=True)
class Submission:
    """A parsed add-checkpoint request body."""

    old: int
    proof: tuple[bytes, ...]
    note: str
    checkpoint: TlogCheckpoint
    text: str
    signatures: tuple[Signature, ...]


def parse_submission(body: bytes) -> Submission | Answer:
    """The request body read strictly, or the 400 (or 413) answer saying why not (check 1)."""
    if len(body) > MAX_BODY_BYTES:
        return Answer(413, f"the body is over {MAX_BODY_BYTES} bytes\n")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Answer(400, "the body is not UTF-8\n")
    head, separator, note = text.partition("\n\n")
    if not separator:
        return Answer(400, "no empty line between the old size and proof, and the checkpoint\n")
    lines = head.split("\n")
    old = _OLD_LINE.fullmatch(lines[0])
    if old is None:
        return Answer(400, "the first line must be 'old <size>' (decimal, no leading zeros)\n")
    if int(old.group(1)) > MAX_SIZE:
        return Answer(400, "old is 2^63 or more: no log is that large\n")
    if len(lines) - 1 > MAX_PROOF_LINES:
        return Answer(400, f"more than {MAX_PROOF_LINES} proof lines\n")
    proof: list[bytes] = []
    for line in lines[1:]:
        raw = strict_b64decode(line)
        if raw is None or len(raw) != 32:
            return Answer(400, "a proof line is not the base64 of a 32-byte hash\n")
        proof.append(raw)
    try:
        checkpoint_text, signatures = parse_note(note)
        checkpoint = parse_tlog_checkpoint(checkpoint_text)
    except NoteError as error:
        return Answer(400, f"{error}\n")
    if checkpoint.size > MAX_SIZE:
        return Answer(400, "the checkpoint's size is 2^63 or more: no log is that large\n")
    return Submission(int(old.group(1)), tuple(proof), note, checkpoint, checkpoint_text, tuple(signatures))


class Witness:
    """A witness: its signer key, the logs it witnesses (origin -> log verifier keys), its state and clock."""

    def __init__(
        self,
        signer: WitnessSigner,
        logs: Mapping[str, Sequence[VerifierKey]],
        state: WitnessState,
        clock: Callable[[], int],
    ) -> None:
        self.signer = signer
        self.logs = {origin: tuple(keys) for origin, keys in logs.items()}
        self.state = state
        self._clock = clock

    def add_checkpoint(self, body: bytes) -> Answer:
        """POST /add-checkpoint: checks 1-7 of spec 9.4 in order (with 9.9.3, 9.9.4, 9.9.6), then 200 with the
        cosignature line."""
        parsed = parse_submission(body)
        if isinstance(parsed, Answer):
            return parsed
        checkpoint = parsed.checkpoint
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            return Answer(404, "unknown log origin\n")
        verification = verify_note(parsed.note, keys)
        if not verification.verified:
            return Answer(403, "no signature verifies under this log's keys\n")
        if parsed.old > checkpoint.size:
            return Answer(400, "old is above the checkpoint's size\n")
        kept = Kept(parsed.text, base64_root(checkpoint.root), _verified_lines(parsed, verification))
        with self.state.transaction() as connection:
            latest = self.state.latest(checkpoint.origin, connection)
            known_size = latest.size if latest is not None else 0
            if parsed.old != known_size:
                return Answer(409, f"{known_size}\n", SIZE_TYPE)
            known_root = base64.b64decode(latest.root) if latest is not None else b""
            if not self._consistent(parsed, known_root):
                self._refused_proof(connection, latest, checkpoint, kept)
                return Answer(422, "the consistency proof does not verify\n")
            label: EvidenceLabel | None = None
            if latest is not None and parsed.old == checkpoint.size:  # check 7, and one text per size (9.9.4)
                label = conflict(latest, kept.text, kept.root)
            if label is not None:  # C2SP would cosign another text of the same root: spec 9.9.4 refuses it
                keep_evidence(connection, self._evidence(checkpoint, kept, label))
                return Answer(409, f"{known_size}\n", SIZE_TYPE)
            now = self._clock()
            cosignature = self.signer.cosign(parsed.text, now)
            keep_latest(connection, Latest(
                checkpoint.origin, checkpoint.size, kept.root, parsed.text, kept.signatures, now,
            ))
        return Answer(200, cosignature.line())

    def _refused_proof(
        self, connection: sqlite3.Connection, latest: Latest | None, checkpoint: TlogCheckpoint, kept: Kept
    ) -> None:
        """Check 6 refused the note: at the size the witness cosigned it is judged at once (another text is
        conclusive, the same text nothing); at a larger size it is pending until the witness cosigns that size."""
        if latest is not None and latest.size == checkpoint.size:
            label = conflict(latest, kept.text, kept.root)
            if label is not None:
                keep_evidence(connection, self._evidence(checkpoint, kept, label))
            return
        keep_pending(connection, Pending(checkpoint.origin, checkpoint.size, kept.root, kept.note, self._clock()))

    def _evidence(self, checkpoint: TlogCheckpoint, kept: Kept, label: EvidenceLabel) -> Evidence:
        return Evidence(checkpoint.origin, checkpoint.size, kept.root, kept.note, label, self._clock())

    @staticmethod
    def _consistent(parsed: Submission, known_root: bytes) -> bool:
        """Check 6: no proof from 0 (or to the same size); else the proof from the cosigned root verifies."""
        if parsed.old == 0 or parsed.old == parsed.checkpoint.size:
            return not parsed.proof
        return verify_consistency(parsed.old, parsed.checkpoint.size, known_root, parsed.checkpoint.root, parsed.proof)

    def latest(self, origin: str) -> Answer:
        """GET /latest?origin=: the latest cosigned checkpoint with its verified log signatures and a fresh
        cosignature (this project's extension), or 404."""
        latest = self.state.latest(origin)
        if latest is None:
            return Answer(404, "no checkpoint cosigned for this origin\n")
        cosignature = self.signer.cosign(latest.checkpoint, self._clock())
        return Answer(200, latest.checkpoint + "\n" + latest.log_signatures + cosignature.line())


def _verified_lines(parsed: Submission, verification: NoteVerification) -> str:
    """The note's signature lines that verify under the log's keys: the first good line of each key, in key order.
    Junk lines (unknown keys, bad signatures) are dropped, so they cannot make one signed text many notes."""
    good: dict[tuple[str, int], Signature] = {}
    note = ParsedNote(parsed.text, list(parsed.signatures))
    for line in verified_signatures(parsed.text, [note], verification.verified):
        good.setdefault((line.name, line.key_hash), line)
    return "".join(good[slot].line() for slot in sorted(good))


@dataclass(frozen=True, slots=True)
class Kept:
    """What the witness keeps of a note: its checkpoint text, root (base64) and the log signature lines that
    verified; `note` is the signed note made of them (the evidence a third party can check)."""

    text: str
    root: str
    signatures: str

    @property
    def note(self) -> str:
        """The checkpoint text, an empty line, the verified log signature lines."""
        return self.text + "\n" + self.signatures
