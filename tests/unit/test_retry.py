"""Retries of the JSON-over-HTTP client (``backends/shared/json_http.py``): transient failures only
(connection refused or reset, a connection dropped mid-response, HTTP 502/503/504), with
backoff, up to the configured count, inside one overall deadline. Each test counts the attempts
a scripted loopback server saw."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from parallel_rag.backends.external_api.retriever import ExternalAPIRetriever, ExternalAPISettings
from parallel_rag.backends.openai_file_search.retriever import OpenAIFileSearchSettings
from parallel_rag.backends.shared import json_http as json_http
from parallel_rag.backends.shared.json_http import BackendRequestError, BackendResponseError
from pydantic import ValidationError
from scripted_server import ScriptedServer, answer, resets
from servers import free_port

FAKE_KEY = "sk-retry-test-FAKE-0123456789"
OK_BODY = {"results": [{"id": "a", "content": "alpha", "score": 1.0, "metadata": {}}]}


def dies_mid_response(conn: socket.socket, stop: threading.Event) -> None:
    """An action: promise 1000 bytes, send 10, close."""
    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{"results')


def hangs(conn: socket.socket, stop: threading.Event) -> None:
    """An action: never answer (for 3 s, longer than the client waits)."""
    stop.wait(3)


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The backoff delays, recorded (and shortened, so the tests stay fast)."""
    recorded: list[float] = []
    real_sleep = time.sleep

    def fake_sleep(seconds: float) -> None:
        recorded.append(seconds)
        real_sleep(min(seconds, 0.01))

    # the client module's view of ``time`` only: servers and other threads sleep for real
    monkeypatch.setattr(
        json_http, "time", SimpleNamespace(monotonic=time.monotonic, sleep=fake_sleep)
    )
    return recorded


def client(**kwargs) -> json_http.JSONHTTPClient:
    options = {"service": "test", "timeout_seconds": 5.0, "max_retries": 2, **kwargs}
    return json_http.JSONHTTPClient(**options)


@pytest.mark.parametrize("code", [502, 503, 504])
def test_transient_statuses_are_retried_until_success(sleeps, code):
    with ScriptedServer(answer(code), answer(code), answer(200, OK_BODY)) as server:
        assert client().post(server.url, {"q": "x"}, {}) == OK_BODY
    assert server.attempts == 3
    assert len(sleeps) == 2 and sleeps[1] > sleeps[0] / 2  # exponential (with jitter)
    assert server.bodies[0] == server.bodies[2]  # the same request each time


@pytest.mark.parametrize("code", [502, 503, 504])
def test_transient_statuses_give_up_after_the_configured_count(sleeps, code):
    with ScriptedServer(answer(code)) as server:
        with pytest.raises(BackendRequestError) as raised:
            client(max_retries=3).post(server.url, {}, {})
    assert server.attempts == 4
    assert f"HTTP {code}" in str(raised.value) and "(after 4 attempts)" in str(raised.value)


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 422, 429, 500])
def test_client_errors_and_500_are_not_retried(sleeps, code):
    with ScriptedServer(answer(code), answer(200, OK_BODY)) as server:
        with pytest.raises(BackendRequestError, match=f"HTTP {code}") as raised:
            client().post(server.url, {}, {})
    assert server.attempts == 1 and sleeps == []
    assert "attempts" not in str(raised.value)


def test_malformed_json_and_oversized_answers_are_not_retried(sleeps):
    with ScriptedServer(answer(200, b"{not json"), answer(200, OK_BODY)) as server:
        with pytest.raises(BackendResponseError, match="malformed JSON"):
            client().post(server.url, {}, {})
    assert server.attempts == 1
    big = json.dumps({"results": ["x" * 2000]}).encode()
    with ScriptedServer(answer(200, big), answer(200, OK_BODY)) as server:
        with pytest.raises(BackendRequestError, match="exceeds max_response_bytes"):
            client(max_response_bytes=1000).post(server.url, {}, {})
    assert server.attempts == 1 and sleeps == []


def test_connection_reset_is_retried(sleeps):
    with ScriptedServer(resets, answer(200, OK_BODY)) as server:
        assert client().post(server.url, {}, {}) == OK_BODY
    assert server.attempts == 2 and len(sleeps) == 1


def test_connection_reset_every_time_fails_naming_the_error(sleeps):
    with ScriptedServer(resets) as server:
        with pytest.raises(BackendRequestError) as raised:
            client().post(server.url, {}, {})
    assert server.attempts == 3
    message = str(raised.value)
    assert "ReadError" in message or "RemoteProtocolError" in message, message
    assert "(after 3 attempts)" in message


def test_a_connection_dropped_mid_response_is_retried(sleeps):
    with ScriptedServer(dies_mid_response, answer(200, OK_BODY)) as server:
        assert client().post(server.url, {}, {}) == OK_BODY
    assert server.attempts == 2


def test_connection_refused_is_retried_then_reported(sleeps, caplog):
    port = free_port()  # nothing listens there
    with caplog.at_level(logging.WARNING, logger=json_http.__name__):
        with pytest.raises(BackendRequestError, match="ConnectError") as raised:
            client(max_retries=2).post(f"http://127.0.0.1:{port}/search", {}, {})
    assert "(after 3 attempts)" in str(raised.value)
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 == len(sleeps)


def test_zero_retries_means_one_attempt(sleeps):
    with ScriptedServer(answer(503), answer(200, OK_BODY)) as server:
        with pytest.raises(BackendRequestError, match="HTTP 503"):
            client(max_retries=0).post(server.url, {}, {})
    assert server.attempts == 1 and sleeps == []


def test_retry_after_is_honoured_when_short(sleeps):
    with ScriptedServer(answer(503, headers={"Retry-After": "1.5"}), answer(200, OK_BODY)) as srv:
        client(backoff_seconds=0.01).post(srv.url, {}, {})
    assert srv.attempts == 2 and sleeps == [1.5]


def test_retries_never_outlive_the_overall_deadline(sleeps):
    # a backoff that would end past the deadline is not slept: the error comes now
    with ScriptedServer(answer(503), answer(200, OK_BODY)) as server:
        with pytest.raises(BackendRequestError, match="HTTP 503"):
            client(timeout_seconds=0.5, backoff_seconds=2.0).post(server.url, {}, {})
    assert server.attempts == 1 and sleeps == []


def test_a_hang_is_a_timeout_and_is_not_retried(sleeps):
    started = time.monotonic()
    with ScriptedServer(hangs, answer(200, OK_BODY)) as server:
        with pytest.raises(BackendRequestError, match="timed out"):
            client(timeout_seconds=0.5).post(server.url, {}, {})
        attempts = server.attempts
    assert attempts == 1 and sleeps == []
    assert time.monotonic() - started < 3


def test_the_backend_settings_carry_the_count_and_the_retriever_uses_it(sleeps):
    template = '{"q": "{{query}}", "k": {{top_k}}}'
    settings = ExternalAPISettings(
        endpoint="http://127.0.0.1:1/search", request_format="custom", request_template=template
    )
    assert settings.max_retries == 2
    assert OpenAIFileSearchSettings(vector_store_id="vs_1").max_retries == 2
    for bad in (-1, 11, "many"):
        with pytest.raises(ValidationError, match="max_retries"):
            ExternalAPISettings(
                endpoint="http://h/x",
                request_format="custom",
                request_template=template,
                max_retries=bad,
            )
    with ScriptedServer(answer(503), answer(503), answer(200, OK_BODY)) as server:
        retriever = ExternalAPIRetriever(
            settings=ExternalAPISettings(
                endpoint=server.url,
                request_format="custom",
                request_template=template,
                content_field="content",
                max_retries=1,
            )
        )
        with pytest.raises(BackendRequestError, match=r"HTTP 503.*after 2 attempts"):
            retriever.invoke("question")
        assert server.attempts == 2
        retriever = retriever.model_copy(
            update={"settings": retriever.settings.model_copy(update={"max_retries": 2})}
        )
        retriever._http = None
        docs = retriever.invoke("question")
    assert [d.id for d in docs] == ["a"] and server.attempts == 3


def test_retry_logs_and_the_final_error_carry_no_secret(sleeps, caplog):
    echo = answer(503, {"error": f"bad gateway for Authorization: Bearer {FAKE_KEY}"})
    with ScriptedServer(echo) as server:
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(BackendRequestError) as raised:
                client(secrets=[FAKE_KEY]).post(
                    server.url, {}, {"Authorization": f"Bearer {FAKE_KEY}"}
                )
    assert server.attempts == 3
    assert FAKE_KEY not in str(raised.value) and "***" in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "retrying" in logged and FAKE_KEY not in logged
