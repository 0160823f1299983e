"""Signed notes, note keys and checkpoints of spec section 8: the Go vectors byte for byte, strict parsing, purity."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_budget.core.log.note import (
    MAX_SIGNATURES,
    UNICODE_WHITE_SPACE,
    CheckpointBody,
    NoteError,
    Signature,
    SignerKey,
    VerifierKey,
    add_signature,
    format_checkpoint,
    generate_signer,
    key_hash,
    parse_checkpoint,
    parse_note,
    sign_note,
    valid_key_name,
    valid_origin,
    verified_signatures,
    verify_note,
)
from tests.conftest import REPO_ROOT

VECTOR: dict[str, str] = json.loads((REPO_ROOT / "tests" / "vectors" / "signed-note.json").read_text())
SIGNER = SignerKey.parse(VECTOR["signer_key"])
VERIFIER = VerifierKey.parse(VECTOR["verifier_key"])
SECOND_VERIFIER = VerifierKey.parse(VECTOR["second_verifier_key"])
TWO_SIGNATURES = VECTOR["signed_note"] + VECTOR["second_signature_line"]
# A second signer, fixed so the tests are deterministic.
WITNESS = SignerKey.from_seed("witness.example/auditor", hashlib.sha256(b"witness seed").digest())
ROOT = hashlib.sha256(b"root").digest()
CHAIN = hashlib.sha256(b"chain").hexdigest()


# --- the Go vectors ---------------------------------------------------------------------------------------------


def test_vector_keys_round_trip() -> None:
    """Both vector keys parse, format back to the same text, and the signer's verifier is the vector's."""
    assert SIGNER.format() == VECTOR["signer_key"]
    assert VERIFIER.format() == VECTOR["verifier_key"]
    assert SECOND_VERIFIER.format() == VECTOR["second_verifier_key"]
    assert SIGNER.verifier() == VERIFIER
    assert (SIGNER.name, SIGNER.key_hash) == ("PeterNeumann", 0xC74F20A3)


def test_key_hash_is_sha256_of_name_newline_algorithm_key() -> None:
    """The key hash is the first 4 bytes, big-endian, of SHA-256(name || 0x0A || 0x01 || public key)."""
    digest = hashlib.sha256(b"PeterNeumann\n\x01" + VERIFIER.public_key).digest()
    assert key_hash("PeterNeumann", VERIFIER.public_key) == int.from_bytes(digest[:4], "big") == 0xC74F20A3


def test_vector_note_is_reproduced_byte_for_byte() -> None:
    """Signing the vector text with the vector key gives the vector's signed note exactly (Ed25519 is deterministic)."""
    signed = sign_note(VECTOR["text"], SIGNER)
    assert signed.encode("utf-8") == VECTOR["signed_note"].encode("utf-8")
    assert signed.endswith("\n\n\u2014 PeterNeumann x08go/" + VECTOR["signed_note"].rsplit("x08go/", 1)[1])


def test_vector_note_parses_into_text_and_one_signature() -> None:
    """The vector note splits into the vector text and one PeterNeumann signature of 64 bytes."""
    text, signatures = parse_note(VECTOR["signed_note"])
    assert text == VECTOR["text"]
    assert [(sig.name, sig.key_hash, len(sig.signature)) for sig in signatures] == [("PeterNeumann", 0xC74F20A3, 64)]
    assert signatures[0].line() == VECTOR["signed_note"][len(text) + 1 :]


def test_vector_second_signature_verifies_with_its_key() -> None:
    """The vector's second signature line verifies with the second verifier key, alongside the first."""
    result = verify_note(TWO_SIGNATURES, [VERIFIER, SECOND_VERIFIER])
    assert result.verified == (VERIFIER, SECOND_VERIFIER)
    assert result.failed == ()
    assert result.unknown == ()
    assert result.ok
    only_second = verify_note(TWO_SIGNATURES, [SECOND_VERIFIER])
    assert only_second.verified == (SECOND_VERIFIER,)
    assert [sig.name for sig in only_second.unknown] == ["PeterNeumann"]


def test_bytes_and_text_notes_verify_the_same() -> None:
    """A note given as UTF-8 bytes verifies as its text does."""
    assert verify_note(TWO_SIGNATURES.encode("utf-8"), [VERIFIER]) == verify_note(TWO_SIGNATURES, [VERIFIER])


# --- verification outcomes --------------------------------------------------------------------------------------


def test_tampered_text_fails_for_every_known_key() -> None:
    """Changing one letter of the text turns both known signatures into failures, none verified."""
    tampered = TWO_SIGNATURES.replace("cryptography", "cryptographY")
    result = verify_note(tampered, [VERIFIER, SECOND_VERIFIER])
    assert result.verified == ()
    assert result.failed == (VERIFIER, SECOND_VERIFIER)
    assert not result.ok


def test_unknown_keys_are_ignored_not_failed() -> None:
    """A signature matching a known key's name but not its hash, or its hash but not its name, is unknown."""
    same_name = VerifierKey("PeterNeumann", key_hash("PeterNeumann", WITNESS.public_key), WITNESS.public_key)
    assert same_name.key_hash != VERIFIER.key_hash
    result = verify_note(VECTOR["signed_note"], [same_name])
    assert result.verified == result.failed == ()
    assert [sig.name for sig in result.unknown] == ["PeterNeumann"]
    assert not result.ok
    renamed = VECTOR["signed_note"].replace("\u2014 PeterNeumann ", "\u2014 PeterNeumann2 ")
    assert verify_note(renamed, [VERIFIER]).unknown[0].name == "PeterNeumann2"


def test_a_good_and_a_bad_signature_by_one_key_are_both_reported() -> None:
    """A key that signs once correctly and once wrongly is listed as verified and as failed; the note is not ok."""
    [good] = parse_note(VECTOR["signed_note"])[1]
    bad = Signature(good.name, good.key_hash, bytes(64))
    result = verify_note(VECTOR["signed_note"] + bad.line(), [VERIFIER])
    assert result.verified == (VERIFIER,)
    assert result.failed == (VERIFIER,)
    assert not result.ok


def test_verified_signatures_keeps_each_good_signature_of_the_text_once() -> None:
    """Across notes: a signature that verifies is kept once, in the order found; a bad one, one by a key not given,
    a note of another text and a note that does not parse are passed over; a parsed note is read as it is."""
    text = parse_note(VECTOR["signed_note"])[0]
    good, second = parse_note(TWO_SIGNATURES)[1]
    bad = Signature(good.name, good.key_hash, bytes(64))
    notes = ["not a note", sign_note("other text\n", WITNESS), VECTOR["signed_note"] + bad.line(), TWO_SIGNATURES]
    assert verified_signatures(text, notes, [VERIFIER, SECOND_VERIFIER]) == [good, second]
    assert verified_signatures(text, notes, [SECOND_VERIFIER]) == [second]
    assert verified_signatures(text, [parse_note(TWO_SIGNATURES)], [SECOND_VERIFIER, VERIFIER]) == [good, second]
    assert verified_signatures("other text\n", notes, [VERIFIER, WITNESS.verifier()]) == [
        parse_note(sign_note("other text\n", WITNESS))[1][0]
    ]


def test_ambiguous_verifier_keys_are_refused() -> None:
    """Two different keys with one name and hash cannot both be trusted: that is a configuration error."""
    forged = VerifierKey.__new__(VerifierKey)
    object.__setattr__(forged, "name", VERIFIER.name)
    object.__setattr__(forged, "key_hash", VERIFIER.key_hash)
    object.__setattr__(forged, "public_key", bytes(32))
    with pytest.raises(NoteError, match="two different verifier keys"):
        verify_note(VECTOR["signed_note"], [VERIFIER, forged])
    assert verify_note(VECTOR["signed_note"], [VERIFIER, VERIFIER]).verified == (VERIFIER,)


# --- adding signatures ------------------------------------------------------------------------------------------


def test_add_signature_appends_a_witness_line() -> None:
    """A cosignature is appended after the existing lines, which stay byte for byte; both then verify."""
    cosigned = add_signature(VECTOR["signed_note"], WITNESS)
    assert cosigned.startswith(VECTOR["signed_note"])
    assert cosigned.count("\u2014 ") == 2
    result = verify_note(cosigned, [VERIFIER, WITNESS.verifier()])
    assert result.verified == (VERIFIER, WITNESS.verifier())
    assert result.ok


def test_add_signature_is_idempotent_and_refuses_a_conflict() -> None:
    """Adding the same key's signature again changes nothing; a different one under the same key is refused."""
    assert add_signature(VECTOR["signed_note"], SIGNER) == VECTOR["signed_note"]
    text, [good] = parse_note(VECTOR["signed_note"])
    other = text + "\n" + Signature(good.name, good.key_hash, bytes(64)).line()
    with pytest.raises(NoteError, match="already has a different one by key PeterNeumann"):
        add_signature(other, SIGNER)


def test_add_signature_respects_the_signature_limit() -> None:
    """A note already holding the maximum number of signatures takes no more."""
    text = parse_note(VECTOR["signed_note"])[0]
    lines = "".join(Signature(f"k{number}", 1, bytes(64)).line() for number in range(MAX_SIGNATURES))
    with pytest.raises(NoteError, match=f"already has {MAX_SIGNATURES} signatures"):
        add_signature(text + "\n" + lines, SIGNER)


# --- strict note parsing ----------------------------------------------------------------------------------------

SIGNED = VECTOR["signed_note"]
LINE = SIGNED[SIGNED.index("\u2014") :]


@pytest.mark.parametrize(
    ("signed", "message"),
    [
        pytest.param(SIGNED[:-1], "must end with a newline", id="no-final-newline"),
        pytest.param(SIGNED.replace("\n\n", "\n"), "no empty line", id="no-empty-line"),
        pytest.param(VECTOR["text"] + "\n", "no signature lines", id="no-signatures"),
        pytest.param(SIGNED.replace("problem,", "problem,\r"), "control character U\\+000D", id="carriage-return"),
        pytest.param(SIGNED.replace("problem,", "problem,\t"), "control character U\\+0009", id="tab"),
        pytest.param(SIGNED.replace("\u2014 ", "-- "), "line 1 does not start with an em dash", id="ascii-dash"),
        pytest.param(SIGNED.replace("\u2014 ", "\u2014"), "line 1 does not start with an em dash", id="no-space"),
        pytest.param(SIGNED.replace("Neumann x08", "Neumann\u00a0x08"), "line 1 has no valid key name", id="nbsp"),
        pytest.param(SIGNED.replace("PeterNeumann x", "Peter+Neumann x"), "no valid key name", id="plus-in-name"),
        pytest.param(SIGNED.replace("PeterNeumann x", " x"), "no valid key name", id="empty-name"),
        pytest.param(SIGNED.replace("nAM=\n", "nAM\n"), "not canonical base64", id="unpadded-base64"),
        pytest.param(SIGNED.replace("nAM=\n", "nAN=\n"), "not canonical base64", id="stray-bits"),
        pytest.param(SIGNED.replace("nAM=\n", "nAM= \n"), "not canonical base64", id="trailing-space"),
        pytest.param(SIGNED.split("x08go")[0] + "AAAAAA==\n", "not canonical base64 of a key hash", id="too-short"),
        pytest.param(SIGNED + "\n", "no signature lines", id="empty-line-after-signatures"),
        pytest.param(SIGNED + LINE.replace("\u2014", "x"), "signature line 2 does not start", id="bad-second-line"),
        pytest.param(SIGNED.replace("problem,", "problem,\ud800"), "lone surrogate", id="lone-surrogate"),
    ],
)
def test_malformed_notes_are_refused_with_one_line(signed: str, message: str) -> None:
    """Each way of breaking the C2SP format is refused with a one-line message saying which."""
    with pytest.raises(NoteError, match=message) as caught:
        parse_note(signed)
    assert "\n" not in str(caught.value)
    with pytest.raises(NoteError):
        verify_note(signed, [VERIFIER])


def test_invalid_utf8_bytes_are_refused() -> None:
    """A note given as bytes must be UTF-8."""
    with pytest.raises(NoteError, match="not valid UTF-8"):
        parse_note(SIGNED.encode("utf-8").replace(b"cryptography", b"crypt\xffgraphy"))


def test_at_most_100_signatures_are_read() -> None:
    """100 signature lines parse; 101 are refused before any is checked."""
    text, [good] = parse_note(SIGNED)
    hundred = text + "\n" + good.line() * MAX_SIGNATURES
    assert len(parse_note(hundred)[1]) == MAX_SIGNATURES
    assert verify_note(hundred, [VERIFIER]).verified == (VERIFIER,)
    with pytest.raises(NoteError, match="101 signature lines, more than 100"):
        parse_note(hundred + good.line())


def test_text_may_hold_empty_lines_and_is_split_at_the_last() -> None:
    """Empty lines inside the text are part of it: the signatures start after the last empty line."""
    text = "first\n\nthird\n"
    signed = sign_note(text, WITNESS)
    assert parse_note(signed)[0] == text
    assert verify_note(signed, [WITNESS.verifier()]).ok


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("no newline", "must end with a newline", id="no-newline"),
        pytest.param("", "must end with a newline", id="empty"),
        pytest.param("bell\x07\n", "control character U\\+0007", id="bell"),
        pytest.param("nul\x00\n", "control character U\\+0000", id="nul"),
        pytest.param("escape\x1b[31m\n", "control character U\\+001B", id="escape"),
    ],
)
def test_sign_refuses_texts_that_are_not_notes(text: str, message: str) -> None:
    """Only a text ending in a newline, without other control characters, is signed."""
    with pytest.raises(NoteError, match=f"cannot sign: .*{message}"):
        sign_note(text, SIGNER)


note_texts = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",), min_codepoint=0x20), max_size=30), min_size=1, max_size=6
).map(lambda lines: "\n".join(lines) + "\n")


@settings(max_examples=100, deadline=None)
@given(note_texts)
def test_any_note_text_round_trips(text: str) -> None:
    """Any valid text signs, parses back to itself, verifies, and fails once one character changes."""
    signed = add_signature(sign_note(text, SIGNER), WITNESS)
    assert parse_note(signed)[0] == text
    result = verify_note(signed, [VERIFIER, WITNESS.verifier()])
    assert result.verified == (VERIFIER, WITNESS.verifier())
    changed = "X" + text
    assert verify_note(changed + signed[len(text) :], [VERIFIER]).failed == (VERIFIER,)


# --- keys -------------------------------------------------------------------------------------------------------

VKEY_HASH, VKEY_B64 = VECTOR["verifier_key"].split("+", 2)[1:]
SKEY_B64 = VECTOR["signer_key"].split("+", 4)[4]


def b64(raw: bytes) -> str:
    """Standard base64 text."""
    return base64.b64encode(raw).decode("ascii")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "PeterNeumann", "expected <name>\\+<8 hex digits>\\+<base64 key>, got 'PeterNeumann'", id="one-part"
        ),
        pytest.param(f"PeterNeumann+{VKEY_HASH}", "expected <name>\\+<8 hex digits>\\+<base64 key>", id="two-parts"),
        pytest.param(VECTOR["signer_key"], "this is a private signer key", id="signer-key"),
        pytest.param(f" PeterNeumann+{VKEY_HASH}+{VKEY_B64}", "leading or trailing white space", id="leading-space"),
        pytest.param(f"PeterNeumann+{VKEY_HASH}+{VKEY_B64}\n", "leading or trailing white space", id="newline"),
        pytest.param(f"+{VKEY_HASH}+{VKEY_B64}", "invalid key name ''", id="empty-name"),
        pytest.param(f"Peter Neumann+{VKEY_HASH}+{VKEY_B64}", "invalid key name 'Peter Neumann'", id="space-name"),
        pytest.param(f"Peter\x07+{VKEY_HASH}+{VKEY_B64}", "invalid key name", id="control-name"),
        pytest.param(f"PeterNeumann+C74F20A3+{VKEY_B64}", "'C74F20A3' is not 8 lowercase hex", id="upper-hash"),
        pytest.param(f"PeterNeumann+c74f20a+{VKEY_B64}", "'c74f20a' is not 8 lowercase hex", id="short-hash"),
        pytest.param(f"PeterNeumann+{VKEY_HASH}+{VKEY_B64[:-1]}", "not canonical standard base64", id="bad-base64"),
        pytest.param(f"PeterNeumann+{VKEY_HASH}+{b64(bytes([1]) + bytes(31))}", "33 bytes", id="short-key"),
        pytest.param(f"PeterNeumann+{VKEY_HASH}+{b64(bytes([2]) + bytes(32))}", "algorithm byte 0x02", id="ecdsa"),
        pytest.param(
            f"PeterNeumann+c74f20a4+{VKEY_B64}", "c74f20a4 does not match .* \\(expected c74f20a3\\)", id="hash"
        ),
        pytest.param(f"PeterNeumann2+{VKEY_HASH}+{VKEY_B64}", "does not match the name and key", id="renamed"),
    ],
)
def test_bad_verifier_keys_get_one_clear_line(text: str, message: str) -> None:
    """Every way a verifier key can be wrong gives one line starting 'not a verifier key:' that names the fault."""
    with pytest.raises(NoteError, match=message) as caught:
        VerifierKey.parse(text)
    assert str(caught.value).startswith("not a verifier key: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(VECTOR["verifier_key"], "must start with PRIVATE\\+KEY\\+", id="verifier-key"),
        pytest.param("PRIVATE+KEY+PeterNeumann", "without its three fields", id="truncated"),
        pytest.param(VECTOR["signer_key"] + "\n", "leading or trailing white space", id="newline"),
        pytest.param(VECTOR["signer_key"].replace("c74f20a3", "00000000"), "does not match", id="wrong-hash"),
        pytest.param(VECTOR["signer_key"].replace("AYEK", "AiEK"), "algorithm byte 0x02", id="algorithm"),
        pytest.param(VECTOR["signer_key"][:-4], "33 bytes", id="short-seed"),
        pytest.param(VECTOR["signer_key"][:-1], "not canonical standard base64", id="bad-base64"),
    ],
)
def test_bad_signer_keys_get_one_clear_line_without_the_secret(text: str, message: str) -> None:
    """A bad signer key gives one line naming the fault, and never repeats the private part."""
    with pytest.raises(NoteError, match=message) as caught:
        SignerKey.parse(text)
    shown = str(caught.value)
    assert shown.startswith("not a signer key: ")
    assert "\n" not in shown
    assert SKEY_B64[:12] not in shown
    assert SKEY_B64[-12:] not in shown


def test_signer_key_repr_hides_the_seed() -> None:
    """repr() of a signer key shows its name and hash, never its seed."""
    shown = repr(SIGNER)
    assert "PeterNeumann" in shown
    assert "seed" not in shown
    assert SIGNER.seed.hex()[:16] not in shown
    assert SKEY_B64[:12] not in shown


def test_key_constructors_check_their_fields() -> None:
    """Keys built directly are checked like parsed ones: name, sizes, and a key hash that matches."""
    with pytest.raises(NoteError, match="does not match"):
        VerifierKey(VERIFIER.name, VERIFIER.key_hash ^ 1, VERIFIER.public_key)
    with pytest.raises(NoteError, match="32 bytes"):
        VerifierKey(VERIFIER.name, VERIFIER.key_hash, VERIFIER.public_key[:31])
    with pytest.raises(NoteError, match="does not match"):
        SignerKey(SIGNER.name, SIGNER.key_hash, bytes(32))
    with pytest.raises(NoteError, match="invalid key name"):
        SignerKey.from_seed("a+b", bytes(32))


def test_generate_signer_makes_fresh_working_keys() -> None:
    """Two generated keys differ, round-trip as text, and sign notes their verifier accepts."""
    first, second = generate_signer("example.com/log"), generate_signer("example.com/log")
    assert first.seed != second.seed
    assert SignerKey.parse(first.format()) == first
    assert VerifierKey.parse(first.verifier().format()) == first.verifier()
    assert verify_note(sign_note("hello\n", first), [first.verifier()]).ok
    assert not verify_note(sign_note("hello\n", first), [second.verifier()]).ok


@pytest.mark.parametrize(
    "name",
    ["", "a b", "a+b", "tab\there", "nbsp\u00a0", "line\u2028sep", "nel\u0085", "unit\x1fsep", "ogham\u1680",
     "lone\ud800"],
)
def test_generate_signer_refuses_bad_names(name: str) -> None:
    """Spec 9.2: a key name with White_Space, a '+', a character below U+0020, a lone surrogate (not UTF-8), or
    nothing at all is refused."""
    with pytest.raises(NoteError, match="cannot make a signer key: invalid key name"):
        generate_signer(name)


@pytest.mark.parametrize("name", ["zero\u200bwidth", "del\x7f", "wé", "書き手", "🔏", "a/b.c_d-e"])
def test_key_names_are_the_spec_rule_not_isprintable(name: str) -> None:
    """Spec 9.2 forbids only '+', characters below U+0020 and White_Space (U+200B is format, not White_Space;
    Go's sumdb/note accepts it too): such names make keys whose verifier keys parse back."""
    assert valid_key_name(name)
    key = generate_signer(name)
    assert VerifierKey.parse(key.verifier().format()) == key.verifier()
    assert SignerKey.parse(key.format()) == key


def test_the_white_space_set_is_unicodes_white_space_property() -> None:
    """Every character str.isspace() calls space is refused, except U+001C..U+001F, which are refused as control
    characters below U+0020 instead; nothing else is White_Space."""
    import sys

    spaces = {chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()}
    assert spaces - UNICODE_WHITE_SPACE == {"\x1c", "\x1d", "\x1e", "\x1f"}
    assert spaces >= UNICODE_WHITE_SPACE


# --- checkpoints ------------------------------------------------------------------------------------------------


def test_checkpoint_text_is_exactly_the_spec_layout() -> None:
    """Origin, decimal size, base64 root and 'chain <hex>', each ending in a newline, nothing else."""
    text = format_checkpoint("compute-budget/0123456789abcdef0123456789abcdef", 42, ROOT, CHAIN)
    expected = f"compute-budget/0123456789abcdef0123456789abcdef\n42\n{b64(ROOT)}\nchain {CHAIN}\n"
    assert text == expected
    assert parse_checkpoint(text) == CheckpointBody("compute-budget/0123456789abcdef0123456789abcdef", 42, ROOT, CHAIN)


def test_empty_store_checkpoint() -> None:
    """An empty store's checkpoint: size 0, the empty root, the genesis chain value of 64 zeros."""
    empty = hashlib.sha256(b"").digest()
    text = format_checkpoint("example.com/log", 0, empty, "0" * 64)
    assert text == "example.com/log\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\nchain " + "0" * 64 + "\n"
    assert parse_checkpoint(text).size == 0


def test_signed_checkpoint_round_trip() -> None:
    """A checkpoint signed by the writer and cosigned by a witness verifies, and its text parses back."""
    body = CheckpointBody("example.com/log", 7, ROOT, CHAIN)
    signed = add_signature(sign_note(body.format(), SIGNER), WITNESS)
    result = verify_note(signed, [VERIFIER, WITNESS.verifier()])
    assert result.ok
    assert parse_checkpoint(result.text) == body


GOOD = f"example.com/log\n7\n{b64(ROOT)}\nchain {CHAIN}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(GOOD[:-1], "must end with a newline", id="no-newline"),
        pytest.param(GOOD.replace(f"chain {CHAIN}\n", ""), "expected 4 lines .* got 3", id="no-chain"),
        pytest.param(GOOD + "extra\n", "got 5", id="extra-line"),
        pytest.param(GOOD.replace("\n7\n", "\n07\n"), "tree size '07'", id="leading-zero"),
        pytest.param(GOOD.replace("\n7\n", "\n+7\n"), "tree size '\\+7'", id="plus-sign"),
        pytest.param(GOOD.replace("\n7\n", "\n 7\n"), "tree size ' 7'", id="space"),
        pytest.param(GOOD.replace("\n7\n", "\n\u0667\n"), "tree size", id="arabic-digit"),
        pytest.param(GOOD.replace("\n7\n", f"\n{2**64}\n"), "not a decimal 64-bit count", id="too-big"),
        pytest.param(GOOD.replace("\n7\n", "\n-1\n"), "tree size '-1'", id="negative"),
        pytest.param(GOOD.replace(b64(ROOT), b64(ROOT[:31])), "32-byte hash", id="short-root"),
        pytest.param(GOOD.replace(b64(ROOT), b64(ROOT).rstrip("=")), "32-byte hash", id="unpadded-root"),
        pytest.param(GOOD.replace(f"chain {CHAIN}", f"chain {CHAIN.upper()}"), "64 lowercase hex", id="upper-chain"),
        pytest.param(GOOD.replace(f"chain {CHAIN}", f"chain  {CHAIN}"), "64 lowercase hex", id="double-space"),
        pytest.param(GOOD.replace(f"chain {CHAIN}", f"chain {CHAIN[:-1]}"), "64 lowercase hex", id="short-chain"),
        pytest.param(GOOD.replace("example.com/log", "example.com/a+b"), "invalid origin", id="plus-origin"),
        pytest.param(GOOD.replace("example.com/log", "example.com log"), "invalid origin", id="space-origin"),
        pytest.param(GOOD.replace("example.com/log", ""), "invalid origin ''", id="empty-origin"),
        pytest.param(GOOD.replace("example.com/log", "x" * 129), "invalid origin", id="long-origin"),
    ],
)
def test_bad_checkpoints_get_one_clear_line(text: str, message: str) -> None:
    """A checkpoint text that departs from spec section 8 in any way is refused, saying where."""
    with pytest.raises(NoteError, match=message) as caught:
        parse_checkpoint(text)
    assert str(caught.value).startswith("not a checkpoint: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param(("a b", 1, ROOT, CHAIN), "invalid checkpoint origin", id="origin"),
        pytest.param(("o", -1, ROOT, CHAIN), "tree size -1", id="negative-size"),
        pytest.param(("o", True, ROOT, CHAIN), "tree size True", id="bool-size"),
        pytest.param(("o", 1, ROOT[:31], CHAIN), "32 bytes", id="short-root"),
        pytest.param(("o", 1, ROOT, CHAIN.upper()), "64 lowercase hex", id="upper-chain"),
    ],
)
def test_format_checkpoint_refuses_bad_fields(fields: tuple[Any, ...], message: str) -> None:
    """Nothing malformed is ever formatted as a checkpoint."""
    with pytest.raises(NoteError, match=message):
        format_checkpoint(*fields)


@pytest.mark.parametrize(
    ("origin", "valid"),
    [
        ("compute-budget/0123456789abcdef0123456789abcdef", True),
        ("x", True),
        ("!~", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a+b", False),
        ("a b", False),
        ("caf\u00e9", False),
        ("tab\t", False),
        ("del\x7f", False),
        (None, False),
    ],
)
def test_valid_origin(origin: Any, valid: bool) -> None:
    """An origin is 1-128 characters of printable ASCII 0x21-0x7E, none of them '+'."""
    assert valid_origin(origin) is valid


origins = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters="+"), min_size=1, max_size=128
)


@settings(max_examples=200, deadline=None)
@given(
    origins,
    st.integers(min_value=0, max_value=2**64 - 1),
    st.binary(min_size=32, max_size=32),
    st.binary(min_size=32, max_size=32),
)
def test_checkpoint_round_trip(origin: str, size: int, root: bytes, chain: bytes) -> None:
    """Any valid checkpoint formats to four lines and parses back to the same fields."""
    text = format_checkpoint(origin, size, root, chain.hex())
    assert text.count("\n") == 4
    assert parse_checkpoint(text) == CheckpointBody(origin, size, root, chain.hex())


# --- purity -----------------------------------------------------------------------------------------------------
