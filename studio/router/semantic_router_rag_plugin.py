"""The rag plugin of a vLLM Semantic Router decision mapped onto ours: its own settings
(``injection_mode``/``on_failure`` ``""``, ``min_confidence_threshold``) and each backend's
``backend_config`` (Milvus/Qdrant connection notes, external_api request templates, mcp
``tool_arguments``, openai ``workflow_mode``/``file_ids``/flat ``filter``, hybrid legs). The
translation that calls ``translate_rag_plugin`` for every decision is
``semantic_router_compat.py``; docs/migrating-from-semantic-router.md has the table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from parallel_rag.backends.milvus.settings import DEFAULT_URI as MILVUS_DEFAULT_URI
from parallel_rag.backends.qdrant.settings import DEFAULT_PATH as QDRANT_DEFAULT_PATH

if TYPE_CHECKING:  # the compat module imports this one
    from parallel_rag.studio.router.semantic_router_compat import Translation

TEMPLATE_PLACEHOLDERS = {
    "{{.Query}}": "{{query}}",
    "{{.TopK}}": "{{top_k}}",
    "{{.Threshold}}": "{{threshold}}",
    "${user_content}": "{{query}}",
    "${top_k}": "{{top_k}}",
    "${threshold}": "{{threshold}}",
}
WEAVIATE_CLASS = "Document"  # the class upstream's weaviate request always reads


def translate_rag_plugin(
    config: dict[str, Any], where: str, upstream_shaped: bool, run: Translation
) -> None:
    for key in ("injection_mode", "on_failure"):
        if config.get(key) == "":
            config.pop(key)  # upstream's "" is "the default"
    if "min_confidence_threshold" in config:
        value = config.pop("min_confidence_threshold")
        run.warn(
            f"{where}.min_confidence_threshold",
            f"{value} ignored: it gates retrieval on upstream's fact-check classifier, which "
            "this router does not run; the route always retrieves",
        )
    backend = config.get("backend")
    settings = config.get("backend_config")
    if not isinstance(settings, dict):
        return
    _backend(backend, settings, f"{where}.backend_config", upstream_shaped, run)
    if backend == "mcp" and upstream_shaped:
        _undeclared_mcp_server(config, settings, f"{where}.backend_config", run)


def _undeclared_mcp_server(
    config: dict[str, Any], settings: dict[str, Any], where: str, run: Translation
) -> None:
    """On a ``skip`` route, retrieval off (what ``skip`` makes of upstream's failed call)."""
    server = settings.get("server_name")
    if not isinstance(server, str) or server in run.mcp_servers:
        return
    if config.get("on_failure") != "skip" or config.get("enabled") is False:
        return
    config["enabled"] = False
    run.warn(
        f"{where}.server_name",
        f"no MCP server {server!r} under mcp_servers: the route forwards without retrieval "
        "(on_failure: skip); to retrieve, declare it: "
        f"`mcp_servers: {{{server}: {{transport: streamable_http, url: http://HOST:PORT/mcp}}}}`",
    )


def _hybrid(settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation) -> None:
    for leg in ("primary", "fallback"):
        named = settings.get(leg)
        leg_config = settings.pop(f"{leg}_config", None)
        if isinstance(named, str):
            entry: dict[str, Any] = {"backend": named}
            if leg_config is not None:
                entry["backend_config"] = leg_config
            settings[leg] = entry
        elif leg_config is not None:
            run.refuse(
                f"{where}.{leg}_config",
                f"goes with {leg}: <backend name>; or write {leg}: {{backend, backend_config}}",
            )
        entry = settings.get(leg)
        if isinstance(entry, dict) and isinstance(entry.get("backend_config"), dict):
            leg_where = f"{where}.{leg}.backend_config"
            _backend(entry.get("backend"), entry["backend_config"], leg_where, upstream_shaped, run)


BackendRewrite = Callable[[dict[str, Any], str, bool, "Translation"], None]


def _backend(
    backend: Any, settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation
) -> None:
    rewrite = _BACKEND_REWRITES.get(backend)
    if rewrite is not None:
        rewrite(settings, where, upstream_shaped, run)


LOCAL_STORES = {  # backend: (its connection settings, the line to add, the local default)
    "milvus": (("uri",), "uri: http://MILVUS_HOST:19530", MILVUS_DEFAULT_URI),
    "qdrant": (("url", "path", "location"), "url: http://QDRANT_HOST:6333", QDRANT_DEFAULT_PATH),
}


def _store(backend: str) -> BackendRewrite:
    """A Milvus/Qdrant block: ``reuse_cache_connection`` reported as ignored, and a block with
    no connection settings reported with the local store it opens and the line to add."""
    connection, line, default = LOCAL_STORES[backend]

    def rewrite(settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation):
        connected = any(settings.get(key) for key in connection)
        if settings.pop("reuse_cache_connection", None) is not None:
            run.warn(
                f"{where}.reuse_cache_connection",
                "ignored: this router has no response-cache connection to reuse; the block's "
                "own connection settings are used",
            )
        if not connected:
            opened = (run.base_dir / default).resolve()
            run.warn(
                where,
                f"no connection settings: {backend} opens the local store {opened} (empty "
                f"unless 'parallel-rag ingest' wrote it); to use your server add `{line}`",
            )

    return rewrite


def _external_api(
    settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation
) -> None:
    template = settings.get("request_template")
    if isinstance(template, str):
        for theirs, ours in TEMPLATE_PLACEHOLDERS.items():
            template = template.replace(theirs, ours)
        settings["request_template"] = template
    if settings.get("request_format") == "weaviate" and not settings.get("class_name"):
        settings["class_name"] = WEAVIATE_CLASS
    if (
        upstream_shaped
        and settings.get("auth_header")
        and settings.get("api_key")
        and "auth_scheme" not in settings
    ):
        run.warn(
            f"{where}.auth_header",
            f"sends the bare key in {settings['auth_header']} (upstream sent 'Bearer KEY'); "
            "add `auth_scheme: Bearer` if your service expects that",
        )


def _mcp(settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation) -> None:
    if "tool_arguments" in settings:
        if "arguments" in settings:
            run.refuse(f"{where}.tool_arguments", "give tool_arguments or arguments, not both")
            return
        settings["arguments"] = settings.pop("tool_arguments")


def _openai(settings: dict[str, Any], where: str, upstream_shaped: bool, run: Translation) -> None:
    mode = settings.pop("workflow_mode", None)
    if mode not in (None, "", "direct_search"):
        run.warn(
            f"{where}.workflow_mode",
            f"{mode!r} is not available: the vector store is searched directly (direct_search) "
            "and its hits are injected; the model is not given a file_search tool",
        )
    file_ids = settings.pop("file_ids", None)
    if file_ids:
        run.warn(
            f"{where}.file_ids",
            "ignored: direct search reads the whole vector store (upstream used file_ids only "
            "in tool_based mode); narrow it with filter on file attributes",
        )
    flat = settings.get("filter")
    if isinstance(flat, dict) and flat and "type" not in flat:
        clauses = [{"type": "eq", "key": k, "value": v} for k, v in flat.items()]
        settings["filter"] = (
            clauses[0] if len(clauses) == 1 else {"type": "and", "filters": clauses}
        )


_BACKEND_REWRITES: dict[str, BackendRewrite] = {
    "milvus": _store("milvus"),
    "qdrant": _store("qdrant"),
    "external_api": _external_api,
    "mcp": _mcp,
    "openai": _openai,
    "hybrid": _hybrid,  # its legs' own settings are rewritten as their backends' are
}
