"""A recording proxy for the router tests: a loopback HTTP server between the router and the
real upstream model server. It keeps every request body it received (so a test can assert the
exact messages the upstream saw) and can misbehave on demand: ``fail500`` answers 500,
``hang`` holds the request without answering, ``slow_stream`` relays a streamed answer with a
pause before each chunk (and counts clients that went away mid-stream)."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class RecordingProxy:
    """``with RecordingProxy("http://127.0.0.1:PORT/v1") as proxy: proxy.url`` is the same
    API on another port; ``proxy.requests`` holds ``(path, body)`` pairs in arrival order."""

    def __init__(self, upstream: str, *, hang_seconds: float = 60.0, chunk_delay: float = 0.3):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.upstream_prefix = parsed.path.rstrip("/")
        self.mode = "forward"  # forward | fail500 | hang | slow_stream
        self.hang_seconds = hang_seconds
        self.chunk_delay = chunk_delay
        self.requests: list[tuple[str, Any]] = []
        self.disconnects = 0
        self.completed_streams = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection; bodies end at close

            def log_message(self, format, *args):  # noqa: A002 - quiet
                pass

            def do_GET(self):  # noqa: N802
                proxy._forward(self, None)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                with proxy._lock:
                    proxy.requests.append((self.path, body))
                proxy._forward(self, raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.upstream_prefix}"

    def last_body(self) -> dict[str, Any]:
        posts = [body for path, body in self.requests if path.endswith("/chat/completions")]
        return posts[-1]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def _forward(self, handler: BaseHTTPRequestHandler, raw: bytes | None) -> None:
        if self.mode == "fail500" and raw is not None:
            body = b'{"error": {"message": "injected failure", "type": "server_error"}}'
            handler.send_response(500)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        if self.mode == "hang" and raw is not None:
            time.sleep(self.hang_seconds)
            return
        path = handler.path
        connection = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=300)
        try:
            headers = {"content-type": "application/json"} if raw is not None else {}
            connection.request("POST" if raw is not None else "GET", path, raw, headers)
            response = connection.getresponse()
            handler.send_response(response.status)
            content_type = response.getheader("content-type", "application/json")
            handler.send_header("content-type", content_type)
            streaming = content_type.startswith("text/event-stream")
            if not streaming:
                content = response.read()
                handler.send_header("content-length", str(len(content)))
                handler.end_headers()
                handler.wfile.write(content)
                return
            handler.end_headers()
            try:
                while True:
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    if self.mode == "slow_stream":
                        time.sleep(self.chunk_delay)
                    handler.wfile.write(chunk)
                    handler.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with self._lock:
                    self.disconnects += 1
                return
            with self._lock:
                self.completed_streams += 1
        finally:
            connection.close()

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
