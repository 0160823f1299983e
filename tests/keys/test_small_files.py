"""`keys.small_files.read_small_file`: keys and checkpoints are regular files, read without waiting, bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compute_budget.errors import InputError
from compute_budget.keys.small_files import read_small_file


def test_a_regular_file_is_read_up_to_one_byte_past_the_limit(tmp_path: Path) -> None:
    """The caller sees whether the file was longer than the limit, without the rest being read."""
    small, large = tmp_path / "small", tmp_path / "large"
    small.write_bytes(b"key")
    large.write_bytes(b"x" * 100)
    assert read_small_file(str(small), 10, "signing key", InputError) == b"key"
    assert read_small_file(str(large), 10, "signing key", InputError) == b"x" * 11


def test_anything_but_a_regular_file_is_one_clear_error_at_once(tmp_path: Path) -> None:
    """Missing, a folder, a FIFO (never waited on) and a device each name what was asked for."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = [
        (tmp_path / "missing", "signing key {} does not exist"),
        (tmp_path, "signing key {} is a folder, not a file"),
        (fifo, "signing key {} is not a regular file (a device, pipe or socket)"),
        (Path("/dev/zero"), "signing key {} is not a regular file (a device, pipe or socket)"),
    ]
    for path, message in cases:
        with pytest.raises(InputError) as raised:
            read_small_file(str(path), 4096, "signing key", InputError)
        assert str(raised.value) == message.format(path)
