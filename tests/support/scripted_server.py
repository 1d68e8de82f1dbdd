"""A scripted HTTP server on 127.0.0.1 for the tests of transport faults: it reads each request
itself (one per connection) and lets an action answer on the raw socket, so an action can
misbehave in ways a real HTTP server would not (reset, hang, stop mid-body, stream past a cap).

``ScriptedServer(first, second, ...)``: the n-th request gets the n-th action, the last one
repeats; ``attempts`` counts the requests that arrived and ``bodies`` holds them. An action is
``action(conn, stop)``: ``stop`` is set when the server shuts down, so a hanging action ends
with it.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable

Action = Callable[[socket.socket, threading.Event], None]


def answer(code: int, body: object = None, headers: dict[str, str] | None = None) -> Action:
    """An action: answer ``code`` with ``body`` (bytes as they are, anything else as JSON;
    by default ``{"detail": code}``) and close."""

    def act(conn: socket.socket, stop: threading.Event) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body or {"detail": code}).encode()
        head = [f"HTTP/1.1 {code} X", f"Content-Length: {len(raw)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + raw)

    return act


CHAT_COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "scripted",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
"""A chat completion an OpenAI-compatible upstream could answer (``answer(200,
CHAT_COMPLETION)``), for tests that read what the router sent it rather than its reply."""


def resets(conn: socket.socket, stop: threading.Event) -> None:
    """An action: abort the connection with a TCP RST (``connection reset by peer``)."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class ScriptedServer:
    """127.0.0.1 on a free port; a context manager (started on enter, stopped on exit)."""

    def __init__(self, *script: Action, path: str = "/search"):
        self.script = list(script)
        self.path = path
        self.attempts = 0
        self.bodies: list[bytes] = []
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}{self.path}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    body += chunk
                self.attempts += 1
                self.bodies.append(body)
                action = self.script[min(self.attempts, len(self.script)) - 1]
                action(conn, self.stop)
            except OSError:  # the client gave up (a cap reached, a timeout): expected here
                pass

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)
