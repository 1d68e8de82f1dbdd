"""What the router tells the caller about a request, beside the upstream's answer: the route,
why it was chosen, what the conversation was retrieved on, branches, cited documents and cache
outcome, as ``x-parallel-rag-*`` headers
(ASCII, bounded) and, for a JSON answer, as a ``parallel_rag`` field (secrets redacted)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from parallel_rag.backends.shared.secrets import redact

HEADER_PREFIX = "x-parallel-rag-"
RESPONSE_FIELD = "parallel_rag"
MAX_HEADER_CHARS = 2000


def header_value(text: str) -> str:
    """Header-safe text: non-ASCII percent-encoded, bounded in length."""
    safe = urllib.parse.quote(text, safe=" ,;:=/.@_-()[]'!*+?#&%")
    return safe[:MAX_HEADER_CHARS]


def report_headers(report: Mapping[str, Any]) -> dict[str, str]:
    headers = {
        f"{HEADER_PREFIX}route": header_value(report["route"]),
        f"{HEADER_PREFIX}route-reason": report["reason"],
        f"{HEADER_PREFIX}retrieval": "on" if report.get("retrieval") else "off",
    }
    if report.get("retrieval"):
        headers[f"{HEADER_PREFIX}cache"] = report.get("cache", "off")
        resolution = report.get("resolution")
        if resolution:  # how the question was written out (the text is in the JSON field)
            headers[f"{HEADER_PREFIX}resolution"] = resolution["method"]
        if "context_ms" in report:  # measured: the retrieval, or the cache lookup on a hit
            headers[f"{HEADER_PREFIX}context-ms"] = str(report["context_ms"])
        stats = report.get("cache_stats")
        if stats is not None:
            headers[f"{HEADER_PREFIX}cache-hits"] = str(stats.hits)
            headers[f"{HEADER_PREFIX}cache-misses"] = str(stats.misses)
            headers[f"{HEADER_PREFIX}cache-invalidations"] = str(stats.invalidations)
        headers[f"{HEADER_PREFIX}branches"] = header_value(
            ",".join(f"{b['branch']}={b['status']}:{b['hits']}" for b in report.get("branches", []))
        )
        headers[f"{HEADER_PREFIX}documents"] = header_value(
            ",".join(urllib.parse.quote(str(i), safe="") for i in report.get("documents", []))
        )
    if report.get("warnings"):
        headers[f"{HEADER_PREFIX}warning"] = header_value(" | ".join(report["warnings"]))
    return headers


def report_field(report: Mapping[str, Any]) -> dict[str, Any]:
    field_ = {k: v for k, v in report.items() if k != "cache_stats"}
    stats = report.get("cache_stats")
    if stats is not None:
        field_["cache_stats"] = {
            "hits": stats.hits,
            "misses": stats.misses,
            "invalidations": stats.invalidations,
        }
    return json.loads(redact(json.dumps(field_, default=str)))
