"""The upstream model server: one pooled ``httpx.AsyncClient`` per upstream (base URL, key,
timeouts), its failures as OpenAI-style errors (502 down or failing, 504 too slow; a 4xx is
passed through as the upstream sent it), and a streamed answer relayed chunk by chunk."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse
from parallel_rag.backends.shared.secrets import register_secrets
from parallel_rag.studio.router.configuration import Decision, RouterConfig
from parallel_rag.studio.router.errors import RouterError


class Upstreams:
    """One pooled ``httpx.AsyncClient`` per upstream (base URL, key, timeouts)."""

    def __init__(self) -> None:
        self._clients: dict[tuple, httpx.AsyncClient] = {}

    def client(self, decision: Decision, config: RouterConfig) -> tuple[httpx.AsyncClient, str]:
        upstream = config.upstream_for(decision)
        key = upstream.resolved_api_key()
        t = upstream.timeout_settings
        ident = (upstream.base_url, key, t.connect, t.read, t.write, t.pool)
        client = self._clients.get(ident)
        if client is None:
            headers = {"authorization": f"Bearer {key}"} if key else {}
            if key:
                register_secrets([key])
            client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool),
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            )
            self._clients[ident] = client
        return client, f"{upstream.base_url}/chat/completions"

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def upstream_failure(error: Exception) -> RouterError:
    if isinstance(error, httpx.TimeoutException):
        return RouterError(
            504,
            f"the upstream model server did not answer in time ({type(error).__name__})",
            kind="api_error",
            code="upstream_timeout",
        )
    return RouterError(
        502,
        f"the upstream model server is unreachable: {type(error).__name__}: {error}",
        kind="api_error",
        code="upstream_unavailable",
    )


def upstream_status_error(status: int, body: bytes) -> RouterError | None:
    """A 5xx from the upstream becomes 502; anything else is passed through (None)."""
    if status < 500:
        return None
    snippet = body[:300].decode("utf-8", errors="replace")
    return RouterError(
        502,
        f"the upstream model server failed with HTTP {status}: {snippet}",
        kind="api_error",
        code="upstream_error",
    )


class RelayResponse(StreamingResponse):
    """A streamed upstream answer relayed chunk by chunk; the upstream call is closed however
    the relay ends (finished, failed, or the client went away)."""

    def __init__(self, upstream: httpx.Response, **kwargs: Any):
        self.upstream = upstream
        super().__init__(self._chunks(), **kwargs)

    async def _chunks(self):
        try:
            async for chunk in self.upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as error:
            yield f"data: {json.dumps(upstream_failure(error).body())}\n\n".encode()

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.upstream.aclose()


async def forward_chat(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    annotation: tuple[str, Any],
) -> Response:
    """Send ``body`` to the upstream and answer with what it answered, ``headers`` added; a
    JSON answer also gets ``annotation`` (field, value). A streamed answer is relayed."""
    if body.get("stream"):
        return await _stream(client, url, body, headers)
    try:
        answer = await client.post(url, json=body)
    except httpx.HTTPError as error:
        raise upstream_failure(error) from None
    failure = upstream_status_error(answer.status_code, answer.content)
    if failure is not None:
        failure.headers.update(headers)
        raise failure
    try:
        data = answer.json()
    except ValueError:
        return Response(
            answer.content,
            status_code=answer.status_code,
            headers=headers,
            media_type=answer.headers.get("content-type"),
        )
    if isinstance(data, dict) and answer.status_code < 400:
        data[annotation[0]] = annotation[1]
    return JSONResponse(data, status_code=answer.status_code, headers=headers)


async def _stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> Response:
    request = client.build_request("POST", url, json=body)
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as error:
        raise upstream_failure(error) from None
    if upstream.status_code >= 400:
        try:
            content = await upstream.aread()
        except httpx.HTTPError as error:
            raise upstream_failure(error) from None
        finally:
            await upstream.aclose()
        failure = upstream_status_error(upstream.status_code, content)
        if failure is not None:
            failure.headers.update(headers)
            raise failure
        return Response(
            content,
            status_code=upstream.status_code,
            headers=headers,
            media_type=upstream.headers.get("content-type"),
        )
    return RelayResponse(
        upstream,
        status_code=upstream.status_code,
        headers={**headers, "cache-control": "no-cache"},
        media_type=upstream.headers.get("content-type", "text/event-stream"),
    )
