"""Submitting a writer's checkpoints to witnesses (spec 9.5, as 9.9.1 amends it), after the append committed: the
store's part. The exchange (what is sent, how answers are judged, the one retry) is the submitter's the store was
handed (`submitter.WitnessSubmitter`; over HTTP, `witness.client`'s); here is only what the store knows: what to
send each witness, planned from its tables, and keeping the cosignatures.

Each witness gets the newest signed checkpoint, with `old` = the size of the largest stored cosignature of that
witness that verifies under its key and is of a checkpoint this store extends (0 if none), and the consistency
proof from there. What the store says about a witness is a claim anyone who can write the database can make, so a
size is only ever taken from a cosignature checked here, never from the witness-sizes table. A 409 gets one retry
from the size it returned when the store can prove from it (at most the checkpoint sent); nothing read from a 409
body is stored. Valid cosignatures are stored with the checkpoint text they cover. A store that cannot plan or keep
is a warning per witness, never a lost record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from compute_budget.core.log.cosignature import WitnessKey, valid_cosignatures
from compute_budget.core.log.merkle import NodeReader, consistency_proof, root_from_reader
from compute_budget.core.log.note import CheckpointBody, parse_checkpoint, parse_note
from compute_budget.errors import ComputeBudgetError, MerkleError, NoteError, StoreDamaged
from compute_budget.store import seal_tables as sealing
from compute_budget.store.backends import backend_for
from compute_budget.store.engine import begin_write
from compute_budget.store.session import StoreSession, utc_now
from compute_budget.submitter import Cosigned, Submission, Submitted, WitnessSubmitter, WitnessTarget

# The share of the timeout that choosing `old` from stored cosignatures may take; the rest is for the request and
# its one retry.
CHECK_SHARE = 0.5


def submit(
    session: StoreSession, note: str, targets: Sequence[WitnessTarget], *, timeout: float, submitter: WitnessSubmitter
) -> list[Submitted]:
    """Send `note` (a signed checkpoint of this store) to every target through `submitter`, planning from and
    storing into this store; never raise for a witness's sake (a store that cannot take the results is a warning
    too)."""
    began = time.monotonic()
    text = parse_note(note)[0]
    checkpoint = parse_checkpoint(text)
    return submitter.submit(
        note, checkpoint.size, targets,
        plan=lambda wanted, deadline: _plan(session, checkpoint, wanted, deadline),
        keep=lambda cosigned: _keep(session, checkpoint.size, text, cosigned),
        plan_deadline=began + timeout * CHECK_SHARE,
        deadline=began + timeout,
        # What planning from and keeping into this store may raise: a warning per witness, never a lost record.
        failures=(ComputeBudgetError, SQLAlchemyError, NoteError),
    )


def _plan(
    session: StoreSession,
    checkpoint: CheckpointBody,
    wanted: Mapping[WitnessTarget, int | None],
    deadline: float,
) -> list[Submission]:
    """One submission per target: `old` (given, else the size of its newest cosignature the store can back) and
    the proof from it, computed from the stored tree, read in one transaction."""
    submissions = []
    with session.reading() as connection:
        reader = sealing.tree_reader(connection, session.seal, checkpoint.size)
        for target, given in wanted.items():
            old = given
            if old is None:
                # Past its share of the timeout (a flood of planted rows: the audit names them), `old` is 0: the
                # witness's 409 then gives the size for the one retry, which the store's own tree must prove from.
                old = _cosigned_size(connection, session.seal, reader, checkpoint, target.key, deadline) or 0
            proof = consistency_proof(reader, old, checkpoint.size) if 0 < old < checkpoint.size else []
            submissions.append(Submission(target, old, tuple(proof)))
    return submissions


def _cosigned_size(
    connection: Connection,
    seal: sealing.SealStatements,
    reader: NodeReader,
    checkpoint: CheckpointBody,
    key: WitnessKey,
    deadline: float,
) -> int | None:
    """The size of the largest stored cosignature by `key` (at most the checkpoint's size) that verifies and is of
    a checkpoint of this log whose root is the store's root at that size; 0 if none; None when the deadline passes
    first. Newest first, stopping at the first that holds: an honest store checks one cosignature per append."""
    size, last_id, now = checkpoint.size, 2**63 - 1, int(time.time())
    roots: dict[int, bytes | None] = {}  # the store's root at each size looked at (a fork's cosignatures share sizes)
    seen: set[tuple[int, object, object]] = set()  # a row copied at the same size is verified once
    while time.monotonic() < deadline:
        # An undecodable planted row is skipped, not a failure of every witness.
        with backend_for(connection).tolerant_text(connection):
            rows = connection.exec_driver_sql(
                seal.witness_cosignatures_desc, (key.name, f"{key.key_id:08x}", size, size, last_id)
            ).fetchall()
        for row in rows:
            last_id, size = int(row[0]), int(row[1])
            if (size, row[2], row[3]) in seen:
                continue
            seen.add((size, row[2], row[3]))
            body = _cosigned_body(row[2], row[3], key, now)
            if body is None or body.size != size or body.origin != checkpoint.origin:
                continue
            if size not in roots:
                roots[size] = _root_at(reader, size)
            if roots[size] == body.root:
                return size
        if len(rows) < sealing.NEWEST_PAGE_ROWS:
            return 0
    return None


def _root_at(reader: NodeReader, size: int) -> bytes | None:
    """The store's root at `size`, or None where its tree cannot say (damaged: not a size it extends; the proof,
    or the audit, says the rest)."""
    try:
        return root_from_reader(reader, size)
    except (MerkleError, StoreDamaged):
        return None


def _cosigned_body(text: object, line: object, key: WitnessKey, now: int) -> CheckpointBody | None:
    """The checkpoint `text` when `line` is `key`'s valid cosignature of it, else None."""
    if not isinstance(text, str) or not isinstance(line, str):
        return None
    try:
        if not valid_cosignatures(text + "\n" + line, [key], now=now):
            return None
        return parse_checkpoint(text)
    except NoteError:
        return None


def _keep(session: StoreSession, size: int, text: str, cosigned: Sequence[Cosigned]) -> None:
    """Store the witnesses' cosignatures (with the checkpoint `text` they cover), append-only, in one write
    transaction. The witness-sizes table is no longer written (spec 9.9.1): a size is read from cosignatures."""
    if not cosigned:
        return
    now = utc_now()
    with begin_write(session.engine) as connection:
        sealing.insert_counted(
            connection, session.seal.insert_cosignature,
            [(size, item.target.key.name, item.target.key_id, item.timestamp, text, item.line, now)
             for item in cosigned],
            "cosignatures",
        )
