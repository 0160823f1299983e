"""`publication.fetch`: every fetch is bounded after decoding, timed out, retried at most 3 times, and a bad answer
is one clear line (`PublicationUnavailable`), tested against hostile servers on loopback."""

from __future__ import annotations

import gzip
import http.server
import time
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
