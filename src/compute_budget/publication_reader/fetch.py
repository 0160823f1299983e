"""Fetching one resource of a publication (spec 10.2), from a folder or an ``http(s)://`` prefix, bounded: each
behind the one `Transport` (`get(path, limit) -> bytes | None`), where a bucket's reader will stand too.

HTTP uses the standard library (`urllib.request`): a publication is a few kinds of static file, and one GET with
a timeout, a size bound and gzip is all it needs. Every limit applies to the bytes after decoding, and a gzip
stream is inflated only up to the limit (a gzip bomb costs one limit of memory). A request has `timeout` seconds
in all, headers, body and redirects (a watchdog shuts its sockets at the deadline: a server trickling bytes is cut
off too); a failure that may pass (a timeout, a 5xx, a reset, a body shorter than its Content-Length) is retried at
most `retries` times; a 404, an HTML page or a body over its limit is said at once, in one line. Redirects are
followed here, not by urllib (spec 11.7.2): at most 3, never from https to http, the URL's user:password@ sent to
its own scheme, host and port only, and each noted in `Redirects` for the report.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.client
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from compute_budget.errors import PublicationMissing, PublicationUnavailable, clip

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
CHECKPOINT_LIMIT = 64 * 1024
TILE_LIMIT = 8192
BUNDLE_LIMIT = 256 * 65_537
_CHUNK = 64 * 1024
_RETRY_PAUSE = 0.25  # seconds before the first retry; doubled for each next one
MAX_REDIRECTS = 3
_REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
_REDIRECTS_SHOWN = 3


class _Transient(Exception):
    """A failure worth retrying (a timeout, a reset, a 5xx)."""


class Transport(Protocol):
    """How the files of a publication are read, whatever holds them (a folder, an HTTP server, next a bucket): one
    file at a time, bounded, a missing one None; every other failure `PublicationUnavailable`, in one line. `names`
    lists a folder's names, or is None when the transport cannot list (HTTP): a caller then asks for files it can
    name."""

    def display(self, path: str) -> str: ...
    def get(self, path: str, limit: int) -> bytes | None: ...
    def names(self, folder: str) -> list[str] | None: ...


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

    def names(self, folder: str) -> list[str]:
        """The names in `folder`, sorted (none when there is no such folder)."""
        try:
            return sorted(os.listdir(os.path.join(self.location, *folder.split("/"))))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as error:
            reason = error.strerror or error
            raise PublicationUnavailable(f"{self.display(folder)} cannot be listed: {reason}") from None


@dataclass(slots=True)
class Redirects:
    """The redirects followed while one publication was read, each as ``A -> B`` (user information hidden): the
    audit's report says them (spec 11.7.2)."""

    followed: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, step: str) -> None:
        """One redirect followed; the first few distinct ones are kept to be shown."""
        self.count += 1
        if step not in self.followed and len(self.followed) < _REDIRECTS_SHOWN:
            self.followed.append(step)

    def warning(self) -> str | None:
        """The report's line for them, or None when none was followed."""
        if not self.count:
            return None
        more = f"; and {self.count - len(self.followed)} more" if self.count > len(self.followed) else ""
        return (
            f"the publication was read through {self.count} redirect(s): {'; '.join(self.followed)}{more} (audit "
            "the final location directly, or ask the publisher why it moved)"
        )


@dataclass(frozen=True, slots=True)
class HttpTransport:
    """The files of a publication under an ``http(s)://`` prefix: one GET each, `timeout` seconds in all (redirects
    included), a failure that may pass retried at most `retries` times, redirects followed as spec 11.7.2 allows."""

    location: str
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    redirects: Redirects = field(default_factory=Redirects, compare=False)

    def display(self, path: str) -> str:
        """Where `path` is, as messages name it (user information in the URL shown as ``***@``)."""
        return shown(self.location.rstrip("/") + "/" + path)

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
        """One try: the GET and its redirects, all within one deadline."""
        url = self.location.rstrip("/") + "/" + path
        owner, authorization = _credentials(url)
        with _Watchdog(self.timeout) as watchdog:
            for hop in range(MAX_REDIRECTS + 1):
                headers = {"Accept-Encoding": "gzip, identity", "User-Agent": "compute-budget"}
                if authorization is not None and _endpoint(url) == owner:  # never to another host, port or scheme
                    headers["Authorization"] = authorization
                answer = _one_get(_bare(url), headers, limit, watchdog)
                if not isinstance(answer, _Moved):
                    return answer
                target = _redirect_target(url, answer.location, hop)
                self.redirects.add(f"{shown(url)} -> {shown(target)}")
                url = target
        raise AssertionError("unreachable: the last hop returns or raises")

    def names(self, folder: str) -> None:
        """None: HTTP cannot list a folder (a static server's index page is no listing to trust)."""
        return


def transport_for(
    location: str, timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES,
    redirects: Redirects | None = None,
) -> Transport:
    """The transport of a publication's `location`: an ``http(s)://`` prefix (its redirects noted in `redirects`),
    else a folder."""
    if location.lower().startswith(("http://", "https://")):
        return HttpTransport(location, timeout, retries, redirects if redirects is not None else Redirects())
    return FolderTransport(location)


@dataclass(frozen=True, slots=True)
class Fetcher:
    """Reads files of the publication at `location` (a folder, or a URL prefix) through its `Transport`."""

    location: str
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    redirects: Redirects = field(default_factory=Redirects, compare=False)

    @property
    def is_http(self) -> bool:
        """True for an ``http://`` or ``https://`` prefix."""
        return isinstance(self.transport, HttpTransport)

    @property
    def transport(self) -> Transport:
        """How the files are read."""
        return transport_for(self.location, self.timeout, self.retries, self.redirects)

    def display(self, path: str) -> str:
        """Where `path` is, as messages name it (user information in a URL shown as ``***@``)."""
        return self.transport.display(path)

    def names(self, folder: str) -> list[str] | None:
        """The names in `folder` of the publication, or None when its transport cannot list one (HTTP)."""
        return self.transport.names(folder)

    def read(self, path: str, limit: int) -> bytes:
        """The bytes of `path` (at most `limit` after decoding); `PublicationMissing` when there is no such file,
        `PublicationUnavailable` in one line otherwise."""
        transport = self.transport
        data = transport.get(path, limit)
        if data is None:
            suffix = " (404)" if isinstance(transport, HttpTransport) else ""
            raise PublicationMissing(f"{transport.display(path)} is missing from the publication{suffix}")
        return data


def shown(url: str) -> str:
    """`url` as messages show it: its user information as ``***@``."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"***@{host[2]}" if host[1] else parts.netloc))


def _bare(url: str) -> str:
    """`url` without its user information, as it is requested."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _endpoint(url: str) -> tuple[str, str, int | None]:
    """The scheme, host and port `url` is sent to: credentials go to that one only."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def _credentials(url: str) -> tuple[tuple[str, str, int | None], str | None]:
    """Where `url`'s user:password@ may be sent, and its Basic authorization header (None without one)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return _endpoint(url), None
    credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    return _endpoint(url), "Basic " + base64.b64encode(credentials.encode("utf-8")).decode("ascii")


def _redirect_target(url: str, location: str, hop: int) -> str:
    """Where a redirect from `url` leads, when it may be followed (spec 11.7.2), else `PublicationUnavailable`."""
    target = urllib.parse.urljoin(url, location.strip())
    step = f"{shown(url)} -> {shown(target)}"
    scheme = urllib.parse.urlsplit(target).scheme.lower()
    if scheme not in ("http", "https"):
        raise PublicationUnavailable(f"a redirect to a {clip(scheme, 20)}: URL is not followed ({clip(step, 300)})")
    if _endpoint(url)[0] == "https" and scheme == "http":
        raise PublicationUnavailable(
            f"a redirect from https to http is refused ({clip(step, 300)}): the publication must stay on https"
        )
    if hop >= MAX_REDIRECTS:
        raise PublicationUnavailable(
            f"more than {MAX_REDIRECTS} redirects (the last: {clip(step, 300)}): the publication cannot be read"
        )
    return target


@dataclass(frozen=True, slots=True)
class _Moved:
    """A redirect's answer: where it points (its Location, maybe relative)."""

    location: str


def _one_get(url: str, headers: dict[str, str], limit: int, watchdog: _Watchdog) -> bytes | _Moved | None:
    """One GET of `url` (no redirect followed): its body, None on a 404, or where a redirect points."""
    where = shown(url)
    opener = urllib.request.build_opener(_Http(watchdog), _Https(watchdog), _NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=watchdog.seconds) as answer:
            kind = answer.headers.get("Content-Type", "")
            if "html" in kind.lower():
                raise PublicationUnavailable(
                    f"{where} answered with an HTML page ({clip(kind, 60)}), not a file of a publication: is the "
                    "prefix right?"
                )
            gzipped = answer.headers.get("Content-Encoding", "").strip().lower() == "gzip"
            data = _body(answer, limit, gzipped, where, _content_length(answer.headers.get("Content-Length")))
    except _Transient:
        if watchdog.fired:  # a body cut short by the deadline is said as the deadline
            raise _Transient(watchdog.late) from None
        raise
    except urllib.error.HTTPError as error:
        error.close()  # it holds the connection
        location = error.headers.get("Location") if error.headers is not None else None
        if error.code in _REDIRECT_CODES and location:
            return _Moved(location)
        if error.code == 404:
            return None
        if error.code >= 500 or error.code == 429:
            raise _Transient(f"the server answered {error.code}") from None
        raise PublicationUnavailable(f"{where}: the server answered {error.code}") from None
    except (OSError, http.client.HTTPException) as error:  # URLError, a timeout, a reset, a short chunked body
        if isinstance(error, PublicationUnavailable):
            raise
        if watchdog.fired:
            raise _Transient(watchdog.late) from None
        reason = getattr(error, "reason", None) or error
        raise _Transient(f"no answer ({clip(str(reason) or type(error).__name__, 80)})") from None
    if watchdog.fired:  # cut at the deadline: what was read may end anywhere
        raise _Transient(watchdog.late)
    if data.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        raise PublicationUnavailable(f"{where} answered with an HTML page, not a file of a publication")
    return data


def _content_length(value: str | None) -> int | None:
    """The Content-Length an answer announces (None when it says none, or nothing usable)."""
    text = (value or "").strip()
    return int(text) if text.isdecimal() else None


class _Watchdog:
    """The deadline of one request (spec 11.7.1): when it passes, every socket the request opened is shut down, so
    that a server sending its headers or body a byte at a time is cut at `seconds`, not at each read's timeout."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    @property
    def late(self) -> str:
        """What a request cut at the deadline says."""
        return f"no answer (or not all of it) within {self.seconds:g} s (--fetch-timeout)"

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._sockets.clear()

    def watch(self, sock: socket.socket) -> None:
        """Cut `sock` at the deadline (at once when it has passed)."""
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                _cut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _cut(sock)


def _cut(sock: socket.socket) -> None:
    """Shut `sock` down, which wakes a read blocked on it (the plain socket's call, also for a TLS one: its
    connection is being abandoned, not closed politely)."""
    with contextlib.suppress(OSError):  # closed already
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _WatchedHTTP(http.client.HTTPConnection):
    """An HTTP connection whose socket its request's `_Watchdog` cuts at the deadline."""

    def __init__(self, host: str, *, watchdog: _Watchdog, **options: Any) -> None:
        super().__init__(host, **options)
        self.watchdog = watchdog

    def connect(self) -> None:
        """Connect (within the socket timeout), then hand the socket to the watchdog."""
        super().connect()
        self.watchdog.watch(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection):
    """An HTTPS connection whose socket its request's `_Watchdog` cuts at the deadline, during the TLS handshake
    too (http.client's own `connect` handshakes before the socket could be handed over)."""

    def __init__(self, host: str, *, watchdog: _Watchdog, **options: Any) -> None:
        super().__init__(host, **options)
        self.watchdog = watchdog

    def connect(self) -> None:
        """Connect, hand the socket to the watchdog, then shake hands."""
        http.client.HTTPConnection.connect(self)
        context = getattr(self, "_context")  # noqa: B009 (the context http.client made or was given)
        hostname = getattr(self, "_tunnel_host", None) or self.host
        tls = context.wrap_socket(self.sock, server_hostname=hostname, do_handshake_on_connect=False)
        self.sock = tls
        self.watchdog.watch(tls)
        tls.do_handshake()


class _Http(urllib.request.HTTPHandler):
    """urllib's HTTP handler, its connections watched."""

    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self.watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        """Open `req` on a watched connection."""
        return self.do_open(functools.partial(_WatchedHTTP, watchdog=self.watchdog), req)


class _Https(urllib.request.HTTPSHandler):
    """urllib's HTTPS handler, its connections watched."""

    def __init__(self, watchdog: _Watchdog) -> None:
        super().__init__()
        self.watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        """Open `req` on a watched connection."""
        return self.do_open(functools.partial(_WatchedHTTPS, watchdog=self.watchdog), req)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """No redirect is followed by urllib: `HttpTransport` follows them itself, to keep credentials to their host."""

    def redirect_request(self, *_: Any) -> None:
        """None: the redirect comes back as an `HTTPError` carrying its Location."""


def _body(answer: object, limit: int, gzipped: bool, where: str, expected: int | None) -> bytes:
    """Read an HTTP body up to `limit` bytes after decoding; gzip inflated only that far. A body shorter than the
    `expected` Content-Length is a failed request (`_Transient`: retried), never a short file."""
    read = getattr(answer, "read")  # noqa: B009 (an http.client response; typed loosely by urllib)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    parts: list[bytes] = []
    size = received = 0
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        received += len(chunk)
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
    if expected is not None and received < expected:  # http.client returns a short body as if it were whole
        raise _Transient(f"the answer ended after {received} of its {expected} bytes")
    if inflate is not None and not inflate.eof:
        raise PublicationUnavailable(f"{where} is a truncated gzip stream")
    return b"".join(parts)
