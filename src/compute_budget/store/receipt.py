"""A row's receipt on request (spec 12.4): the C2SP tlog-proof `prove --format tlog-proof` prints for it, built
from the store's own tree against a signed checkpoint the writer knows covers the row."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from compute_budget.core.log.checkpoint import Checkpoint
from compute_budget.core.log.cosignature import with_cosignatures
from compute_budget.core.log.merkle import inclusion_proof
from compute_budget.core.log.note import Signature, parse_note
from compute_budget.core.receipts import ProofBundle, row_from_values
from compute_budget.errors import CheckpointError, MerkleError, NoteError, StoreDamaged
from compute_budget.store import seal_tables as sealing
from compute_budget.store.session import StoreSession


def receipt(session: StoreSession, budget_id: str, note: str, *, cosigned: bool = False) -> str:
    """The tlog-proof of row `budget_id` against the signed checkpoint `note` (which covers it); with `cosigned`,
    the note carries every stored cosignature of its text, as `prove` gives them."""
    size = Checkpoint.from_note(note).seq
    with session.reading() as connection:
        raw = connection.exec_driver_sql(session.statements.by_budget_id, (budget_id,)).first()
        if raw is None:
            raise StoreDamaged(f"row {budget_id} was just recorded but cannot be read; run `compute-budget audit`")
        values = row_from_values(session.logical(raw))
        seq = values["seq"]
        try:
            path = inclusion_proof(sealing.tree_reader(connection, session.seal, size), seq - 1, size)
        except MerkleError as error:
            raise StoreDamaged(f"cannot prove row {seq}: {error}; run `compute-budget audit`") from None
        if cosigned:
            note = _with_cosignatures(connection.exec_driver_sql(session.seal.cosignatures_at, (size,)).fetchall(),
                                      note)
    return ProofBundle(values, seq - 1, size, tuple(path), note).to_tlog_proof().encode()


def _with_cosignatures(stored: Iterable[Any], note: str) -> str:
    """`note` with the stored cosignature lines of exactly its text (rows of (text, line))."""
    text = parse_note(note)[0]
    lines: list[Signature] = []
    for row in stored:
        filed, line = row[0], row[1]
        if filed != text or not isinstance(line, str):
            continue
        try:
            lines.extend(parse_note(text + "\n" + line)[1])
        except (NoteError, CheckpointError):
            continue
    return with_cosignatures(note, lines)
