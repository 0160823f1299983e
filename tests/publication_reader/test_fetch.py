"""`publication.fetch`: every fetch is bounded after decoding, timed out, retried at most 3 times, and a bad answer
is one clear line (`PublicationUnavailable`), tested against hostile servers on loopback."""

from __future__ import annotations

import datetime
import gzip
import http.server
import ipaddress
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compute_budget.errors import PublicationMissing, PublicationUnavailable
from compute_budget.publication_reader.fetch import BUNDLE_LIMIT, TILE_LIMIT, Fetcher
from tests.witnessing import HandlerFactory


def _server(http_servers: HandlerFactory, body: bytes, *, status: int = 200, headers: dict[str, str] | None = None,
            delay: float = 0.0, hits: list[str] | None = None) -> str:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if hits is not None:
                hits.append(self.path)
            time.sleep(delay)
            self.send_response(status)
            for name, value in {"Content-Type": "application/octet-stream", **(headers or {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    return http_servers(Handler)


def test_a_tile_is_read_and_gzip_is_inflated(http_servers: HandlerFactory) -> None:
    url = _server(http_servers, gzip.compress(b"\x01" * 64), headers={"Content-Encoding": "gzip"})
    assert Fetcher(url).read("tile/0/000.p/2", TILE_LIMIT) == b"\x01" * 64


def test_a_gzip_bomb_stops_at_the_limit(http_servers: HandlerFactory) -> None:
    bomb = gzip.compress(b"\x00" * (BUNDLE_LIMIT * 4))  # 64 MiB inflated, about 64 KiB on the wire
    url = _server(http_servers, bomb, headers={"Content-Encoding": "gzip"})
    with pytest.raises(PublicationUnavailable, match="larger than 16777472 bytes once inflated"):
        Fetcher(url).read("tile/entries/000", BUNDLE_LIMIT)


def test_an_answer_over_the_limit_is_refused(http_servers: HandlerFactory) -> None:
    url = _server(http_servers, b"\x00" * (TILE_LIMIT + 1))
    with pytest.raises(PublicationUnavailable, match="larger than 8192 bytes"):
        Fetcher(url).read("tile/0/000", TILE_LIMIT)


def test_an_html_answer_is_one_clear_line(http_servers: HandlerFactory) -> None:
    url = _server(http_servers, b"<!DOCTYPE html><html>login</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(PublicationUnavailable, match="answered with an HTML page") as raised:
        Fetcher(url).read("checkpoint", 65536)
    assert "\n" not in str(raised.value)


def test_a_slow_server_times_out_after_its_retries(http_servers: HandlerFactory) -> None:
    hits: list[str] = []
    url = _server(http_servers, b"x", delay=1.0, hits=hits)
    started = time.monotonic()
    with pytest.raises(PublicationUnavailable, match=r"no answer .*\(4 tries\)"):
        Fetcher(url, timeout=0.2, retries=3).read("checkpoint", 65536)
    assert len(hits) == 4  # the first request and at most 3 retries
    assert time.monotonic() - started < 8


def test_a_server_error_is_retried_a_missing_file_is_not(http_servers: HandlerFactory) -> None:
    hits: list[str] = []
    failing = _server(http_servers, b"", status=503, hits=hits)
    with pytest.raises(PublicationUnavailable, match="answered 503"):
        Fetcher(failing, retries=2).read("checkpoint", 65536)
    assert len(hits) == 3
    hits.clear()
    missing = _server(http_servers, b"", status=404, hits=hits)
    with pytest.raises(PublicationMissing, match=r"tile/0/000 is missing from the publication \(404\)"):
        Fetcher(missing).read("tile/0/000", TILE_LIMIT)
    assert len(hits) == 1


def test_user_information_in_a_url_is_never_shown(http_servers: HandlerFactory) -> None:
    url = _server(http_servers, b"", status=404).replace("http://", "http://alice:secret@")
    with pytest.raises(PublicationMissing) as raised:
        Fetcher(url).read("checkpoint", 65536)
    assert "secret" not in str(raised.value)
    assert "***@" in str(raised.value)


def test_a_folder_is_read_with_the_same_limits(tmp_path: Path) -> None:
    (tmp_path / "tile" / "0").mkdir(parents=True)
    (tmp_path / "tile" / "0" / "000").write_bytes(b"\x00" * (TILE_LIMIT + 32))
    with pytest.raises(PublicationUnavailable, match="more than 8192 bytes"):
        Fetcher(str(tmp_path)).read("tile/0/000", TILE_LIMIT)
    with pytest.raises(PublicationMissing, match="missing from the publication"):
        Fetcher(str(tmp_path)).read("tile/0/001", TILE_LIMIT)


def test_a_folder_lists_its_names_http_cannot(tmp_path: Path) -> None:
    for size in ("3", "12"):
        (tmp_path / "handover" / size).mkdir(parents=True)
        (tmp_path / "handover" / size / "0a1b2c3d").write_text("note")
    assert Fetcher(str(tmp_path)).names("handover") == ["12", "3"]
    assert Fetcher(str(tmp_path)).names("handover/3") == ["0a1b2c3d"]
    assert Fetcher(str(tmp_path)).names("nothing/here") == []
    assert Fetcher("http://127.0.0.1:9/").names("handover") is None  # never asked: HTTP has no listing


def _trickler(http_servers: HandlerFactory, *, head: bytes, body: bytes, pause: float) -> str:
    """A server that sends `head` whole, then `body` a byte every `pause` seconds (or, with no head, its headers
    themselves that slowly)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.wfile.write(head)
            self.wfile.flush()
            for byte in body:
                time.sleep(pause)
                self.wfile.write(bytes([byte]))
                self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            return None

    return http_servers(Handler)


_HEAD = b"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 6\r\n\r\n"


@pytest.mark.parametrize(("head", "body"), [(_HEAD, b"abcdef"), (b"", _HEAD + b"abcdef")], ids=["body", "headers"])
def test_a_server_trickling_a_byte_every_half_second_is_cut_at_the_timeout(
    http_servers: HandlerFactory, head: bytes, body: bytes
) -> None:
    # every read gets a byte within its socket timeout: only a deadline on the whole request cuts it (spec 11.7.1)
    url = _trickler(http_servers, head=head, body=body[:7], pause=0.5)  # 3 s and more
    started = time.monotonic()
    with pytest.raises(PublicationUnavailable, match=r"within 1 s \(--fetch-timeout\) \(1 tries\)"):
        Fetcher(url, timeout=1, retries=0).read("checkpoint", 65536)
    assert time.monotonic() - started < 1.8


def test_a_body_shorter_than_its_content_length_is_a_failed_request_and_retried(http_servers: HandlerFactory) -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", "64")
            self.end_headers()
            self.wfile.write(b"\x01" * (64 if len(hits) == 3 else 32))  # whole on the third try only
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            return None

    url = http_servers(Handler)
    with pytest.raises(PublicationUnavailable, match=r"ended after 32 of its 64 bytes \(2 tries\)"):
        Fetcher(url, retries=1).read("tile/0/000", TILE_LIMIT)
    assert len(hits) == 2
    hits.clear()
    assert Fetcher(url, retries=2).read("tile/0/000", TILE_LIMIT) == b"\x01" * 64
    assert len(hits) == 3


def _redirecting(http_servers: HandlerFactory, to: str | None, seen: list[tuple[str, str | None]]) -> str:
    """A server that notes each request's path and Authorization header, and redirects it to `to` + its path (None:
    to the next path of itself, /r1, /r2 ...), or serves b"ok" at /ok."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization")))
            if to is None and self.path == "/ok":
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                return
            self.send_response(302)
            self.send_header("Location", f"{to}{self.path}" if to is not None else f"/r{len(seen)}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return None

    return http_servers(Handler)


def test_a_redirect_is_followed_and_noted_its_credentials_never_sent_to_another_port(
    http_servers: HandlerFactory,
) -> None:
    final: list[tuple[str, str | None]] = []
    first: list[tuple[str, str | None]] = []
    other = _redirecting(http_servers, None, final)  # serves /ok
    url = _redirecting(http_servers, other, first).replace("http://", "http://alice:secret@")
    fetcher = Fetcher(url)
    assert fetcher.read("ok", 65536) == b"ok"
    assert first[0][1] is not None
    assert first[0][1].startswith("Basic ")
    assert final == [("/ok", None)]  # another port: not to it (spec 11.7.2)
    shown = url.replace("alice:secret@", "***@")
    assert fetcher.redirects.followed == [f"{shown}/ok -> {other}/ok"]
    warning = fetcher.redirects.warning()
    assert warning is not None
    assert "secret" not in warning
    assert f"{other}/ok" in warning


def test_a_relative_redirect_keeps_the_credentials_and_a_fourth_is_refused(http_servers: HandlerFactory) -> None:
    seen: list[tuple[str, str | None]] = []
    url = _redirecting(http_servers, None, seen).replace("http://", "http://alice:secret@")
    with pytest.raises(PublicationUnavailable, match=r"more than 3 redirects \(the last: .*/r3 -> .*/r4\)") as raised:
        Fetcher(url).read("checkpoint", 65536)
    assert [path for path, _ in seen] == ["/checkpoint", "/r1", "/r2", "/r3"]  # 3 followed, the 4th not
    assert all(auth is not None for _, auth in seen)  # the same scheme, host and port all along
    assert "secret" not in str(raised.value)


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], str]]:
    """Start HTTPS servers on 127.0.0.1 redirecting every request to a given URL prefix (None: serving b"ok"), with
    a certificate the client trusts (SSL_CERT_FILE); yields a factory of their URLs."""
    certificate, key = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(to: str | None) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302 if to is not None else 200)
                if to is not None:
                    self.send_header("Location", to + self.path)
                self.send_header("Content-Length", "0" if to is not None else "2")
                self.end_headers()
                if to is None:
                    self.wfile.write(b"ok")

            def log_message(self, format: str, *args: object) -> None:
                return None

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return f"https://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    return folder / "cert.pem", folder / "key.pem"


def test_a_redirect_from_https_to_http_is_refused_one_to_https_followed(
    http_servers: HandlerFactory, tls_server: Callable[[str | None], str]
) -> None:
    seen: list[tuple[str, str | None]] = []
    plain = _redirecting(http_servers, None, seen)
    secure = tls_server(plain)
    with pytest.raises(PublicationUnavailable, match=r"a redirect from https to http is refused \(https://.* -> http://"):
        Fetcher(secure).read("ok", 65536)
    assert seen == []  # nothing was asked of the http server
    final = tls_server(None)
    fetcher = Fetcher(tls_server(final), timeout=5)
    assert fetcher.read("ok", 65536) == b"ok"
    assert fetcher.redirects.count == 1
    assert fetcher.redirects.followed[0].endswith(f" -> {final}/ok")
