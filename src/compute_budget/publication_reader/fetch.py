"""Fetching one resource of a publication (spec 10.2), from a folder or an ``http(s)://`` prefix, bounded: each
behind the one `Transport` (`get(path, limit) -> bytes | None`), where a bucket's reader will stand too.

HTTP uses the standard library (`urllib.request`): a publication is a few kinds of static file, and one GET with
a timeout, a size bound and gzip is all it needs. Every limit applies to the bytes after decoding, and a gzip
stream is inflated only up to the limit (a gzip bomb costs one limit of memory). A request has `timeout` seconds
in all (a server trickling bytes is cut off too); a failure that may pass (a timeout, a 5xx, a reset) is retried
at most `retries` times; a 404, an HTML page or a body over its limit is said at once, in one line.
"""

from __future__ import annotations

import base64
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from typing import Protocol

from compute_budget.errors import PublicationMissing, PublicationUnavailable, clip

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
CHECKPOINT_LIMIT = 64 * 1024
TILE_LIMIT = 8192
BUNDLE_LIMIT = 256 * 65_537
_CHUNK = 64 * 1024
_RETRY_PAUSE = 0.25  # seconds before the first retry; doubled for each next one


class _Transient(Exception):
    """A failure worth retrying (a timeout, a reset, a 5xx)."""


class Transport(Protocol):
    """How the files of a publication are read, whatever holds them (a folder, an HTTP server, next a bucket): one
    file at a time, bounded, a missing one None; every other failure `PublicationUnavailable`, in one line."""

    def display(self, path: str) -> str: ...
    def get(self, path: str, limit: int) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class FolderTransport:
    """The files of a publication in a folder."""

    location: str

    def display(self, path: str) -> str:
        """Where `path` is, as messages name it."""
        return os.path.join(self.location, path)

    def get(self, path: str, limit: int) -> bytes | None:
        """The bytes of `path` (at most `limit`), or None when there is no such file."""
        full = os.path.join(self.location, *path.split("/"))
        try:
            with open(full, "rb") as handle:
                data = handle.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise PublicationUnavailable(f"{full} cannot be read: {error.strerror or error}") from None
        if len(data) > limit:
            raise PublicationUnavailable(f"{full} holds more than {limit} bytes: it is not a file of a publication")
        return data


@dataclass(frozen=True, slots=True)
class HttpTransport:
    """The files of a publication under an ``http(s)://`` prefix: one GET each, `timeout` seconds in all, a failure
    that may pass retried at most `retries` times."""

    location: str
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES

    def display(self, path: str) -> str:
        """Where `path` is, as messages name it (user information in the URL shown as ``***@``)."""
        parts = urllib.parse.urlsplit(self.location.rstrip("/") + "/" + path)
        host = parts.netloc.rpartition("@")
        netloc = f"***@{host[2]}" if host[1] else parts.netloc
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def get(self, path: str, limit: int) -> bytes | None:
        """The bytes of `path` (at most `limit` after decoding), or None on a 404."""
        attempt = 0
        while True:
            try:
                return self._get(path, limit)
            except _Transient as error:
                if attempt >= self.retries:
                    raise PublicationUnavailable(
                        f"{self.display(path)}: {error} ({attempt + 1} tries); the publication cannot be read"
                    ) from None
                time.sleep(_RETRY_PAUSE * (2**attempt))
                attempt += 1

    def _get(self, path: str, limit: int) -> bytes | None:
        url = self.location.rstrip("/") + "/" + path
        headers = {"Accept-Encoding": "gzip, identity", "User-Agent": "compute-budget"}
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:  # user:password@ goes as Basic authentication, never into a message
            credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")
            url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        request = urllib.request.Request(url, headers=headers)
        deadline = time.monotonic() + self.timeout
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                kind = answer.headers.get("Content-Type", "")
                if "html" in kind.lower():
                    raise PublicationUnavailable(
                        f"{self.display(path)} answered with an HTML page ({clip(kind, 60)}), not a file of a "
                        "publication: is the prefix right?"
                    )
                gzipped = answer.headers.get("Content-Encoding", "").strip().lower() == "gzip"
                data = _body(answer, limit, gzipped, deadline, self.display(path))
        except urllib.error.HTTPError as error:
            error.close()  # it holds the connection
            if error.code == 404:
                return None
            if error.code >= 500 or error.code == 429:
                raise _Transient(f"the server answered {error.code}") from None
            raise PublicationUnavailable(f"{self.display(path)}: the server answered {error.code}") from None
        except (TimeoutError, ConnectionError, urllib.error.URLError, OSError) as error:
            if isinstance(error, PublicationUnavailable):
                raise
            reason = getattr(error, "reason", None) or error
            raise _Transient(f"no answer ({clip(str(reason), 80)})") from None
        if data.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
            raise PublicationUnavailable(
                f"{self.display(path)} answered with an HTML page, not a file of a publication"
            )
        return data


def transport_for(location: str, timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES) -> Transport:
    """The transport of a publication's `location`: an ``http(s)://`` prefix, else a folder."""
    if location.lower().startswith(("http://", "https://")):
        return HttpTransport(location, timeout, retries)
    return FolderTransport(location)


@dataclass(frozen=True, slots=True)
class Fetcher:
    """Reads files of the publication at `location` (a folder, or a URL prefix) through its `Transport`."""

    location: str
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES

    @property
    def is_http(self) -> bool:
        """True for an ``http://`` or ``https://`` prefix."""
        return isinstance(self.transport, HttpTransport)

    @property
    def transport(self) -> Transport:
        """How the files are read."""
        return transport_for(self.location, self.timeout, self.retries)

    def display(self, path: str) -> str:
        """Where `path` is, as messages name it (user information in a URL shown as ``***@``)."""
        return self.transport.display(path)

    def read(self, path: str, limit: int) -> bytes:
        """The bytes of `path` (at most `limit` after decoding); `PublicationMissing` when there is no such file,
        `PublicationUnavailable` in one line otherwise."""
        transport = self.transport
        data = transport.get(path, limit)
        if data is None:
            suffix = " (404)" if isinstance(transport, HttpTransport) else ""
            raise PublicationMissing(f"{transport.display(path)} is missing from the publication{suffix}")
        return data


def _body(answer: object, limit: int, gzipped: bool, deadline: float, where: str) -> bytes:
    """Read an HTTP body up to `limit` bytes after decoding, before `deadline`; gzip inflated only that far."""
    read = getattr(answer, "read")  # noqa: B009 (an http.client response; typed loosely by urllib)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    parts: list[bytes] = []
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise _Transient("the answer took longer than the timeout")
        chunk = read(_CHUNK)
        if not chunk:
            break
        if inflate is not None:
            try:
                chunk = inflate.decompress(chunk, limit + 1 - size)
            except zlib.error:
                raise PublicationUnavailable(f"{where} is not valid gzip") from None
        size += len(chunk)
        parts.append(chunk)
        if size > limit or (inflate is not None and inflate.unconsumed_tail):
            raise PublicationUnavailable(
                f"{where} is larger than {limit} bytes{' once inflated' if inflate else ''}: "
                "it is not a file of a publication"
            )
    if inflate is not None and not inflate.eof:
        raise PublicationUnavailable(f"{where} is a truncated gzip stream")
    return b"".join(parts)
