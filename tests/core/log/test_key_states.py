"""The pure rules of key rotation and revocation (issue 31, items 1 and 2): `KEY@SIZE` / `KEY@SIZE:ROOT`, whether
a signature of a retired or revoked key counts, and what a handover note is."""

from __future__ import annotations

import base64

import pytest

from compute_budget.core.log.key_states import (
    KeyState,
    KeyStates,
    KeyStatus,
    handover_in,
    is_key,
    parse_key_state,
    signature_problem,
)
from compute_budget.core.log.note import (
    SignerKey,
    VerifierKey,
    add_signature,
    format_checkpoint,
    generate_signer,
    sign_note,
)
from compute_budget.errors import KeyStateError, NoteError

# A fixed seed: the key text is part of test ids, which every test process must collect alike (pytest-xdist).
KEY = SignerKey.from_seed("writer@example.org:8080", bytes(range(32))).verifier()
ROOT = bytes(range(32))
ROOT_B64 = base64.b64encode(ROOT).decode("ascii")


def resolve(text: str) -> VerifierKey:
    return VerifierKey.parse(text)


def test_retired_splits_at_the_last_at_sign_even_when_the_key_name_holds_one() -> None:
    state = parse_key_state(f"{KEY.format()}@12", KeyStatus.RETIRED, resolve)
    assert state == KeyState(KEY, KeyStatus.RETIRED, 12)
    assert state.words() == "retired at 12"


def test_revoked_splits_at_the_last_at_sign_then_the_last_colon() -> None:
    state = parse_key_state(f"{KEY.format()}@7:{ROOT_B64}", KeyStatus.REVOKED, resolve)
    assert (state.key, state.size, state.root, state.words()) == (KEY, 7, ROOT, "revoked at 7")


@pytest.mark.parametrize(
    ("text", "status", "words"),
    [
        ("no-at-sign", KeyStatus.RETIRED, "expected KEY@SIZE"),
        ("@12", KeyStatus.RETIRED, "expected KEY@SIZE"),
        (f"{KEY.format()}@", KeyStatus.RETIRED, "SIZE must be a tree size"),
        (f"{KEY.format()}@012", KeyStatus.RETIRED, "SIZE must be a tree size"),
        (f"{KEY.format()}@-1", KeyStatus.RETIRED, "SIZE must be a tree size"),
        (f"{KEY.format()}@{2**63}", KeyStatus.RETIRED, "below 2^63"),
        (f"{KEY.format()}@7", KeyStatus.REVOKED, "the root after the last ':'"),
        (f"{KEY.format()}@7:AAAA", KeyStatus.REVOKED, "32-byte tree root"),
        (f"{KEY.format()}@7:{ROOT_B64[:-1]}!", KeyStatus.REVOKED, "32-byte tree root"),
        ("not-a-key@7", KeyStatus.RETIRED, "--retired 'not-a-key@7'"),
    ],
)
def test_a_bad_option_is_one_typed_line_naming_it(text: str, status: KeyStatus, words: str) -> None:
    with pytest.raises(KeyStateError) as raised:
        parse_key_state(text, status, resolve)
    message = str(raised.value)
    assert words in message
    assert "\n" not in message
    assert message.startswith(f"--{status.value}")


def test_a_retired_key_counts_up_to_its_size_only() -> None:
    state = KeyState(KEY, KeyStatus.RETIRED, 5)
    assert signature_problem(state, 5, None) is None
    assert signature_problem(state, 1, None) is None
    assert signature_problem(state, 6, None) == "retired at 5"


def test_a_revoked_key_counts_only_on_its_exact_checkpoint_or_one_proven_consistent_below_it() -> None:
    state = KeyState(KEY, KeyStatus.REVOKED, 5, ROOT)
    assert signature_problem(state, 5, ROOT) is None
    assert signature_problem(state, 5, bytes(32)) == "revoked at 5"  # a fork at its size
    assert signature_problem(state, 3, bytes(32)) == "revoked at 5"  # not proven
    assert signature_problem(state, 3, bytes(32), proven=True) is None
    assert signature_problem(state, 6, ROOT, proven=True) == "revoked at 5"  # nothing above, whatever proves it


def test_an_active_key_always_counts_and_a_key_given_twice_is_refused() -> None:
    assert signature_problem(KeyState(KEY), 10**9, None) is None
    states = KeyStates.of([KeyState(KEY, KeyStatus.RETIRED, 3)])
    assert states.of_key(KEY).words() == "retired at 3"
    assert states.of_key(generate_signer("other").verifier()).status is KeyStatus.ACTIVE
    with pytest.raises(KeyStateError, match="given twice"):
        KeyStates.of([KeyState(KEY, KeyStatus.RETIRED, 3), KeyState(KEY, KeyStatus.REVOKED, 3, ROOT)])


def test_a_handover_is_a_note_with_two_writer_signatures_the_first_the_giver() -> None:
    old, new = generate_signer("old"), generate_signer("new")
    text = format_checkpoint("example.org/log", 3, ROOT, "0" * 64)
    single = sign_note(text, old)
    assert handover_in(single) is None
    handover = handover_in(add_signature(single, new))
    assert handover is not None
    assert is_key(handover.giver, old.verifier())
    assert not is_key(handover.giver, new.verifier())
    assert [is_key(taker, new.verifier()) for taker in handover.takers] == [True]
    with pytest.raises(NoteError):
        handover_in("not a note")
