"""Note keys on disk: signer keys read from files, verifier keys given as text or files, new keys written safely.

A signer key file holds one line, ``PRIVATE+KEY+<name>+<hash>+<base64>``; it is created with mode 0600 and never
overwritten. Every failure is one line naming the file and what is wrong, never the secret.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from compute_budget.core.log.cosignature import WitnessKey, WitnessSigner, is_witness_key_text
from compute_budget.core.log.note import SIGNER_KEY_PREFIX, SignerKey, VerifierKey, valid_key_name
from compute_budget.errors import InputError, NoteError
from compute_budget.keys.small_files import read_small_file

SIGNING_KEY_ENV_VAR = "COMPUTE_BUDGET_SIGNING_KEY"
MAX_KEY_FILE_BYTES = 4096

_Secret = TypeVar("_Secret")
_Public = TypeVar("_Public", VerifierKey, WitnessKey)


def default_key_file(name: str) -> str:
    """The default file of a new key: its name with ``/`` turned into ``_``, plus ``.key``."""
    return name.replace("/", "_") + ".key"


def _read_key_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of a key file (one line, surrounding white space removed), or one clear error."""
    shown = os.fspath(path)
    raw = read_small_file(shown, MAX_KEY_FILE_BYTES, what, InputError)
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise InputError(f"{what} {shown} is not a key file (it is larger than {MAX_KEY_FILE_BYTES} bytes)")
    try:
        text = raw.decode("utf-8").strip()  # key names may be any UTF-8 (spec 9.2); the rest is ASCII
    except UnicodeDecodeError:
        raise InputError(f"{what} {shown} is not a key file (it is not UTF-8 text)") from None
    if "\n" in text:
        raise InputError(f"{what} {shown} is not a key file (a key is one line)")
    return text


def load_signer_key(path: str | os.PathLike[str]) -> SignerKey:
    """The signer key in file `path`; `InputError` (one line, without the secret) when it cannot be used,
    including a key file any group or other permission bit is set on (spec 9.3: its secret may have been read)."""
    return _load_secret(path, "signing key", SignerKey.parse)


def load_witness_signer(path: str | os.PathLike[str]) -> WitnessSigner:
    """The witness signer key (type 0x04 or 0x06, spec 9.2) in file `path`, under the same rules as
    `load_signer_key`."""
    return _load_secret(path, "witness key", WitnessSigner.parse)


def load_any_signer(path: str | os.PathLike[str]) -> SignerKey | WitnessSigner:
    """The note signer key or witness signer key in file `path` (for printing its verifier key)."""
    return _load_secret(path, "signing key", _parse_any_signer)


def _parse_any_signer(text: str) -> SignerKey | WitnessSigner:
    return WitnessSigner.parse(text) if is_witness_key_text(text) else SignerKey.parse(text)


def _load_secret(path: str | os.PathLike[str], what: str, parse: Callable[[str], _Secret]) -> _Secret:
    text = _read_key_file(path, what)
    try:
        key = parse(text)
    except NoteError as error:
        raise InputError(f"{what} {os.fspath(path)}: {error}") from None
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode) and mode & 0o077:
        raise InputError(
            f"{what} {os.fspath(path)} has mode {stat.S_IMODE(mode):04o}: group or others may read it; a signer "
            f"key file must be private (chmod 600 {os.fspath(path)}; if others did read it, the key has leaked)"
        )
    return key


def verifier_key(value: VerifierKey | str | os.PathLike[str], *, what: str = "trusted key") -> VerifierKey:
    """A verifier key given as a `VerifierKey`, its text (``<name>+<hash>+<base64>``) or a file holding it.

    Text that parses as a verifier key is that key, whatever files exist (spec 9.3: a file planted under the key's
    text must not replace it); only other text names a file. Signer key text is refused without being echoed.
    `what` names the key in messages.
    """
    if isinstance(value, VerifierKey):
        return value
    return _public_key(os.fspath(value), what, VerifierKey.parse)


def witness_key(value: WitnessKey | str | os.PathLike[str]) -> WitnessKey:
    """A witness verifier key (type 0x04 or 0x06, spec 9.3) given as a `WitnessKey`, its text, or a file holding it;
    read as `verifier_key` reads a writer's key."""
    if isinstance(value, WitnessKey):
        return value
    return _public_key(os.fspath(value), "witness key", WitnessKey.parse)


def _public_key(text: str, what: str, parse: Callable[[str], _Public]) -> _Public:
    if text.strip().startswith(SIGNER_KEY_PREFIX):
        raise InputError(
            f"a {what} was given as private signer key text (PRIVATE+KEY+…, not shown): give its verifier key, "
            "which `compute-budget verifier-key FILE` prints; if this text was shared, the key has leaked"
        )
    try:
        return parse(text)
    except NoteError as error:
        parse_error = error
    if not os.path.exists(text):
        if "+" not in text:
            raise InputError(f"{what} {text[:80]!r} is neither a verifier key (<name>+<hash>+<key>) nor a file")
        raise InputError(f"{what} {text[:80]!r}: {parse_error}") from None
    content = _read_key_file(text, f"{what} file")
    try:
        return parse(content)
    except NoteError as error:
        raise InputError(f"{what} file {text}: {error}") from None


def write_new_signer_key(path: str | os.PathLike[str], key: SignerKey | WitnessSigner) -> Path:
    """Write `key` to a new file `path`, mode 0600; never overwrites (`InputError` if anything is there)."""
    target = Path(path)
    if not valid_key_name(key.name):  # pragma: no cover  (a SignerKey always has a valid name)
        raise InputError(f"invalid key name {key.name!r}")
    # Encoded before the file exists: nothing can fail between creating it and writing it but the disk.
    content = (key.format() + "\n").encode("utf-8")
    if os.path.islink(target):
        raise InputError(f"{target} is a symbolic link: compute-budget never writes through one")
    if target.is_dir():
        raise InputError(f"{target} is a folder; give the key file's path")
    if not target.parent.is_dir():
        raise InputError(f"cannot write key {target}: folder {target.parent} does not exist")
    try:
        handle = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        raise InputError(f"{target} already exists: a key file is never overwritten (choose another --out)") from None
    except OSError as error:
        raise InputError(f"cannot write key {target}: {error.strerror or error}") from None
    try:
        os.fchmod(handle, 0o600)  # whatever the umask
        written = os.write(handle, content)
        if written != len(content):
            raise OSError(f"only {written} of {len(content)} bytes were written")
    except BaseException as error:
        os.close(handle)
        target.unlink(missing_ok=True)  # this call created it: a half-written key must not block a retry
        if isinstance(error, OSError):
            raise InputError(f"cannot write key {target}: {error.strerror or error}") from None
        raise
    os.close(handle)
    return target
