"""Load and bounded concurrency on the LangServe server.

- The real server (``parallel-rag serve`` on 127.0.0.1, embedded defaults over a copy of the
  example index) answers 200 requests at concurrency 16 with no errors and no lost branches:
  every result has both branches ``ok`` and a cited answer.
- The admission bound (``studio/admission.py``): beyond ``max_concurrency`` requests wait in a
  bounded queue; past the queue (or its timeout) they get 503 with ``Retry-After`` at once.
  These run the app in-process against a slow loopback backend that counts how many searches
  are in flight, so the bound is observed where it matters: at the backend.

``bench/load.py`` is the large version (2,000 requests, latency percentiles, memory).
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import threading
import time

import httpx
import pytest
from app_servers import running_serve
from backend_servers import TENANT_DOCS, LoopbackServer, Reply, custom_route
from parallel_rag.graph.builder import build_graphs
from parallel_rag.studio.admission import AdmissionLimits, Gate, GateFull
from parallel_rag.studio.langserve_app import create_app
from studio_servers import server_workspace

pytestmark = pytest.mark.integration

REQUESTS, CONCURRENCY = 200, 16
API_KEY = "load-test-key-0123456789"
QUESTION = "When did the Golden Gate Bridge open?"


# ------------------------------------------------------------------------------- real server


@pytest.fixture(scope="module")
def served(example_index, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("load")
    config_path = server_workspace(example_index, workdir, {})
    with running_serve(config_path, workdir) as (server, url):
        yield url, server


async def drive(url: str, bodies: list[dict], concurrency: int) -> list[tuple[int, dict, float]]:
    """POST every body to ``url`` with ``concurrency`` workers; (status, json, seconds) each."""
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    results: list[tuple[int, dict, float]] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                started = time.perf_counter()
                response = await client.post(url, json=body)
                results.append(
                    (response.status_code, response.json(), time.perf_counter() - started)
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def test_server_answers_200_requests_at_concurrency_16_without_losing_a_branch(
    served, example_questions
):
    url, server = served
    questions = [q["question"] for q in example_questions]
    bodies = [{"input": {"query": questions[i % len(questions)]}} for i in range(REQUESTS)]
    started = time.perf_counter()
    results = asyncio.run(drive(f"{url}/rag/invoke", bodies, CONCURRENCY))
    elapsed = time.perf_counter() - started

    assert len(results) == REQUESTS
    failures = [(status, body) for status, body, _ in results if status != 200]
    assert not failures, failures[:3]
    latencies = sorted(seconds for *_, seconds in results)
    lost = collections.Counter(
        f"{b['retriever']}: {b['status']} {b['error']}"
        for _, body, _ in results
        for b in body["output"]["branches"]
        if b["status"] != "ok"
    )
    assert not lost, (lost.most_common(5), latencies[-5:])
    for _, body, _ in results:
        output = body["output"]
        assert [b["retriever"] for b in output["branches"]] == ["lexical", "dense"]
        assert output["warnings"] == [] and output["documents"] and output["citations"]
    print(
        f"\nload: {REQUESTS} requests at concurrency {CONCURRENCY} in {elapsed:.1f}s "
        f"({REQUESTS / elapsed:.1f} req/s); latency p50 {statistics.median(latencies):.2f}s, "
        f"p95 {latencies[int(0.95 * len(latencies)) - 1]:.2f}s, max {latencies[-1]:.2f}s"
    )
    assert "Traceback" not in server.log()


# ------------------------------------------------------------------------------- the bound


class SlowSearch:
    """A custom search service answering after ``delay`` seconds; tracks searches in flight."""

    def __init__(self, delay: float):
        self.delay = delay
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.route = custom_route(TENANT_DOCS, API_KEY)

    def __call__(self, request) -> Reply:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.delay)
            return self.route(request)
        finally:
            with self.lock:
                self.in_flight -= 1


def slow_app(tenant_bm25_dir, search_url: str, limits: AdmissionLimits):
    config = {
        "retrievers": [
            {"name": "lexical", "backend": "bm25", "backend_config": {"index_path": "bm25"}},
            {
                "name": "remote",
                "backend": "external_api",
                "backend_config": {
                    "endpoint": f"{search_url}/search",
                    "request_format": "custom",
                    "request_template": '{"q": "{{query}}", "k": {{top_k}}}',
                    "api_key": API_KEY,
                    "content_field": "text",
                },
            },
        ],
        "generator": {"kind": "extractive", "min_similarity": None},
    }
    return create_app(build_graphs(config, base_dir=tenant_bm25_dir), limits=limits)


async def fire(app, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await asyncio.gather(
            *(client.post(path, json=body, timeout=120) for path, body in requests)
        )


def assert_busy(response: httpx.Response) -> None:
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["type"] == "service_unavailable" and error["code"] == "server_busy"


def test_beyond_the_bound_requests_queue_then_get_503_with_retry_after(tenant_bm25_dir):
    search = SlowSearch(delay=1.5)
    with LoopbackServer(search) as server:
        app = slow_app(tenant_bm25_dir, server.url, AdmissionLimits(max_concurrency=2, max_queue=2))
        started = time.monotonic()
        responses = asyncio.run(fire(app, [("/rag/invoke", {"input": {"query": QUESTION}})] * 8))
        elapsed = time.monotonic() - started
    ok = [r for r in responses if r.status_code == 200]
    busy = [r for r in responses if r.status_code != 200]
    assert len(ok) == 4 and len(busy) == 4  # 2 running + 2 queued; the rest refused at once
    for response in busy:
        assert_busy(response)
    for response in ok:
        statuses = {b["retriever"]: b["status"] for b in response.json()["output"]["branches"]}
        assert statuses == {"lexical": "ok", "remote": "ok"}
    assert search.peak <= 2  # never more graph runs at the backend than the bound
    assert elapsed >= 2 * search.delay  # the queued two waited for a slot


def test_a_request_waits_in_the_queue_at_most_its_timeout(tenant_bm25_dir):
    search = SlowSearch(delay=2.0)
    limits = AdmissionLimits(max_concurrency=1, max_queue=5, queue_timeout_seconds=0.5)
    with LoopbackServer(search) as server:
        app = slow_app(tenant_bm25_dir, server.url, limits)
        responses = asyncio.run(fire(app, [("/rag/invoke", {"input": {"query": QUESTION}})] * 3))
    assert sorted(r.status_code for r in responses) == [200, 503, 503]
    for response in responses:
        if response.status_code == 503:
            assert_busy(response)
            assert "timed out in the queue" in response.json()["error"]["message"]
    assert search.peak == 1


def test_a_batch_counts_as_its_runs_and_runs_at_most_the_bound_at_once(tenant_bm25_dir):
    search = SlowSearch(delay=0.5)
    with LoopbackServer(search) as server:
        app = slow_app(tenant_bm25_dir, server.url, AdmissionLimits(max_concurrency=2, max_queue=0))
        batch = {"inputs": [{"query": QUESTION}] * 5}
        responses = asyncio.run(
            fire(app, [("/rag/batch", batch), ("/rag/invoke", {"input": {"query": QUESTION}})])
        )
    assert responses[0].status_code == 200 and len(responses[0].json()["output"]) == 5
    assert_busy(responses[1])  # the batch holds both slots; no queue
    assert search.peak <= 2


def test_reads_are_never_held_back_by_a_full_gate(tenant_bm25_dir):
    search = SlowSearch(delay=1.5)
    with LoopbackServer(search) as server:
        app = slow_app(tenant_bm25_dir, server.url, AdmissionLimits(max_concurrency=1, max_queue=0))

        async def scenario():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                running = asyncio.create_task(
                    client.post("/rag/invoke", json={"input": {"query": QUESTION}}, timeout=60)
                )
                await asyncio.sleep(0.3)
                health = await client.get("/healthz")
                schema = await client.get("/rag/input_schema")
                refused = await client.post(
                    "/rag/invoke", json={"input": {"query": QUESTION}}, timeout=60
                )
                return await running, health, schema, refused

        running, health, schema, refused = asyncio.run(scenario())
    assert running.status_code == 200 and health.status_code == 200
    assert schema.status_code == 200
    assert_busy(refused)


async def test_gate_is_fifo_and_gives_back_slots_of_requests_that_gave_up():
    gate = Gate(capacity=1, max_queue=2)
    await gate.acquire(1, timeout=1)
    order: list[str] = []

    async def take(name: str, timeout: float) -> None:
        try:
            await gate.acquire(1, timeout)
        except GateFull:
            order.append(f"{name}:refused")
            return
        order.append(name)
        await asyncio.sleep(0.05)
        gate.release(1)

    waiters = [asyncio.create_task(take("a", 5)), asyncio.create_task(take("b", 0.1))]
    await asyncio.sleep(0.01)
    await take("c", 5)  # queue full (a, b): refused at once
    await asyncio.sleep(0.2)  # b times out in the queue
    gate.release(1)
    await asyncio.gather(*waiters)
    assert order == ["c:refused", "b:refused", "a"]
    assert gate.in_use == 0 and gate.queued == 0
    with pytest.raises(ValueError, match="max_concurrency"):
        AdmissionLimits(max_concurrency=0)
