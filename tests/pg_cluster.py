"""A throwaway PostgreSQL cluster on a loopback port, for the tests and for CI.

    python -m tests.pg_cluster start DIR   # prints the admin URL; the cluster runs until `stop`
    python -m tests.pg_cluster stop DIR

As root the server runs as the `postgres` user (the server refuses root). Password authentication is on for
TCP, so a wrong password is really refused.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

PASSWORD = "compute-budget-test"


def find_bin(name: str) -> str | None:
    """A PostgreSQL server program from PATH or Debian's versioned folders."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def available() -> bool:
    """True when initdb and pg_ctl can be found."""
    return find_bin("initdb") is not None and find_bin("pg_ctl") is not None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def start(folder: Path) -> str:
    """Create and start a cluster in `folder`; returns its admin SQLAlchemy URL."""
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise RuntimeError("PostgreSQL server programs (initdb, pg_ctl) are not installed")
    folder.mkdir(parents=True, exist_ok=True)
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir(exist_ok=True)
    password_file = folder / "pwfile"
    password_file.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
        shutil.chown(password_file, "postgres", "postgres")
        folder.chmod(0o755)
        reachable = subprocess.run(_as_server_user(["test", "-x", str(folder)]), check=False).returncode == 0
        if not reachable:  # a parent folder the server's user may not enter (mktemp -d makes them 0700)
            raise RuntimeError(
                f"the postgres user cannot reach {folder}: a folder above it is not searchable (mode 0700?); "
                "use a folder it can enter, such as one under /tmp"
            )
    port = _free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True}
    subprocess.run(
        _as_server_user([initdb, "-D", str(data), "-U", "postgres", f"--pwfile={password_file}", "-E", "UTF8",
                         "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"]),
        **quiet,  # type: ignore[call-overload]
    )
    options = (f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
               "-c full_page_writes=off -c max_connections=100")
    subprocess.run(
        _as_server_user([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "server.log"), "-w", "start"]),
        **quiet,  # type: ignore[call-overload]
    )
    (folder / "port").write_text(str(port))
    return f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"


def stop(folder: Path) -> None:
    """Stop the cluster in `folder` (fast shutdown) and remove it.

    Only a folder `start` made (it holds `data`) is removed, or an empty one; never the current directory: an
    empty path is `.`, and `rmtree('.')` once wiped a whole working copy."""
    if not str(folder).strip() or folder.resolve() == Path.cwd().resolve() or folder.resolve() == Path.home():
        raise SystemExit(f"pg_cluster stop: refusing to remove {str(folder)!r}: not a cluster folder")
    if not (folder / "data").is_dir():
        with contextlib.suppress(OSError):
            folder.rmdir()  # the empty folder of a start that never got as far as initdb
        return
    pg_ctl = find_bin("pg_ctl")
    if pg_ctl is not None:
        subprocess.run(_as_server_user([pg_ctl, "-D", str(folder / "data"), "-m", "fast", "-w", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    action, where = sys.argv[1], Path(sys.argv[2])
    if action == "start":
        try:
            print(start(where))
        except (RuntimeError, subprocess.CalledProcessError) as error:
            raise SystemExit(f"pg_cluster start: {error}") from None
    elif action == "stop":
        stop(where)
    else:
        raise SystemExit(f"usage: python -m tests.pg_cluster start|stop DIR (not {action!r})")
