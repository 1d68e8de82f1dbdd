"""vLLM Semantic Router configurations, read as its code reads them and mapped onto ours.

``translate_router_data`` takes the raw router part of a config file and returns the same data
in this router's shape plus the start-up warnings that list everything that could not map (it
is never dropped silently). It runs before validation, so what is left is checked by the
ordinary schema and a refusal still names its field. docs/migrating-from-semantic-router.md is
the table of every field and behaviour this module owns.

What maps:

- a decision's ``priority`` orders the routes (highest first: a keyword tie goes to it),
  ``modelRefs[0].model`` becomes the route's upstream ``model``, ``rules`` leaves of type
  ``keyword`` add that signal's ``keywords`` and leaves of type ``embedding`` add that signal's
  ``candidates`` as ``examples`` with its ``threshold`` (the matcher's keywords -> similarity ->
  default), and the description stops being a matching text (upstream only documents with
  it). Every other leaf (domain, language, authz, jailbreak...), ``NOT``, an ``AND`` that only
  partly maps, further model refs, ``algorithm`` and the decision's other plugins are warned
  about (in a decision of ours, an unknown plugin type is still refused by the schema).
- the rag plugin: ``injection_mode: ""``/``on_failure: ""`` mean the default;
  ``min_confidence_threshold`` is reported as ignored; hybrid ``primary: <name>`` with
  ``primary_config`` (and the fallback's) become our nested legs; mcp ``tool_arguments`` are our
  ``arguments`` (same ``${...}`` placeholders); openai ``workflow_mode``/``file_ids`` are
  reported (only direct search exists), a flat ``filter`` mapping becomes OpenAI's filter
  language; a custom ``request_template`` with ``{{.Query}}``/``${user_content}`` (and the top-k
  and threshold ones) is rewritten to ours; a weaviate request without ``class_name`` searches
  ``Document`` as upstream does.
- milvus/qdrant: ``reuse_cache_connection`` is reported as ignored, and a block with no
  connection settings is reported with the exact local path it will open and the line to add.
- an mcp block naming a server the file does not declare under ``mcp_servers``, on a route
  whose ``on_failure`` is ``skip``: the route's retrieval is turned off and listed with the
  lines to add (upstream's MCP call fails at that commit and ``skip`` forwards without
  context; with another policy the schema's refusal stands, naming the server).
- ``providers`` (each model's ``backend_refs`` as its decisions' upstream, ``default_model``
  as a route): ``semantic_router_providers.py``.

The rag plugin and its backends' settings are mapped in ``semantic_router_rag_plugin.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from parallel_rag.graph.configuration import ConfigError
from parallel_rag.studio.router.semantic_router_providers import (
    ProviderModel,
    decision_upstream,
    default_route,
    provider_models,
)
from parallel_rag.studio.router.semantic_router_rag_plugin import translate_rag_plugin

UPSTREAM_TOP_KEYS = ("version", "listeners", "providers", "entrypoints", "recipes")
UPSTREAM_ROUTING_KEYS = ("modelCards", "projections")
UPSTREAM_GLOBAL_KEYS = ("router", "services", "stores", "integrations")
UPSTREAM_CATALOG_KEYS = ("embeddings", "system", "external", "kbs", "modules")
UPSTREAM_DECISION_KEYS = (
    "tier",
    "output_contract",
    "output_contract_spec",
    "annotations",
    "algorithm",
    "adaptations",
    "candidateIterations",
    "emits",
)
MAPPED_SIGNALS = ("keywords", "embeddings")


class Translation:
    """The data being rewritten, the warnings and the refusals found on the way."""

    def __init__(self, base_dir: Path, data: dict[str, Any]):
        self.base_dir = base_dir
        self.warnings: list[str] = []
        self.refusals: list[str] = []
        self.noted: set[str] = set()
        self.top_upstream = data.get("upstream") is not None
        servers = data.get("mcp_servers")
        self.mcp_servers = set(servers) if isinstance(servers, dict) else set()
        self.models: dict[str, ProviderModel] = {}  # providers.models with a usable backend
        self.default_model: str | None = None  # providers.defaults.default_model

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"{where}: {message}")

    def refuse(self, where: str, message: str) -> None:
        self.refusals.append(f"{where}: {message}")


def translate_router_data(
    data: dict[str, Any], base_dir: Path | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(the router data in this router's shape, start-up warnings). ``ConfigError`` lists every
    upstream field that cannot be mapped, each with what to write instead."""
    out = copy.deepcopy(data)
    run = Translation(base_dir or Path.cwd(), out)
    if "providers" in out:
        provider_models(out.pop("providers"), run)
    for key in UPSTREAM_TOP_KEYS:
        if key in out:
            out.pop(key)
            run.warn(key, "vLLM Semantic Router setting, ignored here (see the migration page)")
    _global(out, run)
    routing = out.get("routing")
    if isinstance(routing, dict):
        _routing(routing, run)
    if run.refusals:
        lines = "\n".join(f"  {line}" for line in run.refusals)
        raise ConfigError(f"vLLM Semantic Router fields that cannot be mapped:\n{lines}")
    return out, run.warnings


def _global(out: dict[str, Any], run: Translation) -> None:
    settings = out.get("global")
    if not isinstance(settings, dict):
        return
    for key in UPSTREAM_GLOBAL_KEYS:
        if key in settings:
            settings.pop(key)
            run.warn(f"global.{key}", "vLLM Semantic Router service setting, ignored here")
    catalog = settings.get("model_catalog")
    if isinstance(catalog, dict):
        for key in UPSTREAM_CATALOG_KEYS:
            if key in catalog:
                catalog.pop(key)
                run.warn(f"global.model_catalog.{key}", "not used here (only deployments)")
    if not settings:
        out.pop("global")


def _routing(routing: dict[str, Any], run: Translation) -> None:
    strategy = routing.pop("strategy", None)
    if strategy not in (None, "priority"):
        run.warn("routing.strategy", f"{strategy!r} is not available; decisions go by priority")
    for key in UPSTREAM_ROUTING_KEYS:
        if key in routing:
            routing.pop(key)
            run.warn(f"routing.{key}", "vLLM Semantic Router setting, ignored here")
    signals = routing.pop("signals", None) or {}
    if not isinstance(signals, dict):
        run.refuse("routing.signals", "must be a mapping of signal kinds")
        signals = {}
    unmapped = sorted(set(signals) - set(MAPPED_SIGNALS))
    if unmapped:
        run.warn(
            "routing.signals",
            f"{', '.join(unmapped)}: signals this router does not compute (only keywords and "
            "embeddings map); rules that name them are listed per decision",
        )
    keywords = _by_name(signals.get("keywords"))
    embeddings = _by_name(signals.get("embeddings"))
    decisions = routing.get("decisions")
    if not isinstance(decisions, list):
        return
    for index, decision in enumerate(decisions):
        if isinstance(decision, dict):
            _decision(decision, f"routing.decisions.{index}", keywords, embeddings, run)
    if any(isinstance(d, dict) and "_priority" in d for d in decisions):
        decisions.sort(key=lambda d: -d.get("_priority", 0) if isinstance(d, dict) else 0)
    for decision in decisions:
        if isinstance(decision, dict):
            decision.pop("_priority", None)
    default_route(routing, run)


def _by_name(rules: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(rules, list):
        return {}
    return {r["name"]: r for r in rules if isinstance(r, dict) and isinstance(r.get("name"), str)}


def _signal_notes(kind: str, name: str, rule: dict[str, Any], run: Translation) -> None:
    """How a used signal's matching differs here (once per signal)."""
    where = f"routing.signals.{kind}.{name}"
    if where in run.noted:
        return
    run.noted.add(where)
    if kind == "embeddings":
        method = rule.get("aggregation_method", "max")
        if method not in ("max", "any"):
            run.warn(where, f"aggregation_method {method!r} is matched as 'max' (best candidate)")
        return
    method = rule.get("method")
    if method not in (None, "", "exact", "regex"):
        run.warn(where, f"method {method!r} is matched as whole words, case-insensitively")
    if rule.get("operator", "OR") != "OR":
        run.warn(where, f"operator {rule['operator']!r}: any one keyword matches here")
    if rule.get("case_sensitive"):
        run.warn(where, "case_sensitive: keywords match case-insensitively here")


def _decision(
    decision: dict[str, Any],
    where: str,
    keywords: dict[str, dict[str, Any]],
    embeddings: dict[str, dict[str, Any]],
    run: Translation,
) -> None:
    name = decision.get("name", where)
    upstream_shaped = any(k in decision for k in ("rules", "modelRefs", "priority"))
    if "priority" in decision:
        priority = decision.pop("priority")
        if not isinstance(priority, int) or isinstance(priority, bool):
            run.refuse(f"{where}.priority", f"must be an integer, got {priority!r}")
        else:
            decision["_priority"] = priority
    refs = decision.pop("modelRefs", None)
    if refs is not None:
        _model_refs(decision, refs, where, name, run)
    decision_upstream(decision, run)
    ignored = [k for k in UPSTREAM_DECISION_KEYS if k in decision]
    for key in ignored:
        decision.pop(key)
    if ignored:
        run.warn(f"{where} ({name})", f"ignored: {', '.join(ignored)}")
    rules = decision.pop("rules", None)
    if rules:
        _rules(decision, rules, where, name, keywords, embeddings, run)
    if upstream_shaped:
        # upstream never matches on a decision's description (it documents the decision)
        decision.setdefault("match_description", False)
    plugins = decision.get("plugins")
    if isinstance(plugins, list):
        kept = []
        for index, plugin in enumerate(plugins):
            at = f"{where}.plugins.{index}"
            other = isinstance(plugin, dict) and plugin.get("type") not in (None, "rag")
            if other and upstream_shaped:  # (in one of ours, the schema refuses it)
                run.warn(f"{at} ({name})", f"plugin {plugin['type']!r} is not supported, ignored")
                continue
            if isinstance(plugin, dict) and isinstance(plugin.get("configuration"), dict):
                translate_rag_plugin(
                    plugin["configuration"], f"{at}.configuration", upstream_shaped, run
                )
            kept.append(plugin)
        decision["plugins"] = kept


def _model_refs(
    decision: dict[str, Any], refs: Any, where: str, name: str, run: Translation
) -> None:
    at = f"{where}.modelRefs"
    if not isinstance(refs, list) or not refs or not isinstance(refs[0], dict):
        run.refuse(at, "must list at least one {model: NAME}; or write model: NAME")
        return
    if "model" in decision:
        run.refuse(at, "give model or modelRefs, not both (write model: NAME)")
        return
    decision["model"] = refs[0].get("model")
    if len(refs) > 1:
        others = [r.get("model") for r in refs[1:] if isinstance(r, dict)]
        run.warn(
            f"{at} ({name})",
            f"the route asks for {decision['model']!r}; {others} are not selected among "
            "(upstream's per-decision algorithm is not available)",
        )
    extras = sorted({k for r in refs if isinstance(r, dict) for k in r} - {"model"})
    if extras:
        run.warn(f"{at} ({name})", f"ignored: {', '.join(extras)}")


def _rules(
    decision: dict[str, Any],
    rules: Any,
    where: str,
    name: str,
    keywords: dict[str, dict[str, Any]],
    embeddings: dict[str, dict[str, Any]],
    run: Translation,
) -> None:
    at = f"{where}.rules"
    leaves: list[tuple[dict[str, Any], bool]] = []  # (leaf, under a NOT)
    operators: set[str] = set()
    _walk(rules, leaves, operators, negated=False)
    mapped, unmapped = [], []
    for leaf, negated in leaves:
        kind, signal = leaf.get("type"), leaf.get("name")
        if negated or (kind, signal) == (None, None):
            unmapped.append(_leaf_text(leaf, negated))
        elif kind == "keyword" and signal in keywords:
            decision.setdefault("keywords", []).extend(keywords[signal].get("keywords") or [])
            _signal_notes("keywords", signal, keywords[signal], run)
            mapped.append(f"keyword {signal}")
        elif kind == "embedding" and signal in embeddings:
            rule = embeddings[signal]
            _signal_notes("embeddings", signal, rule, run)
            decision.setdefault("examples", []).extend(rule.get("candidates") or [])
            threshold = rule.get("threshold")
            if threshold is not None:
                previous = decision.get("similarity_threshold")
                decision["similarity_threshold"] = (
                    threshold if previous is None else min(previous, threshold)
                )
            mapped.append(f"embedding {signal}")
        elif kind in ("keyword", "embedding"):
            run.refuse(f"{at} ({name})", f"{kind} signal {signal!r} is not under routing.signals")
        else:
            unmapped.append(_leaf_text(leaf, negated))
    if not unmapped:
        if "AND" in operators and len(mapped) > 1:
            run.warn(f"{at} ({name})", f"AND of {mapped}: any one of them selects the route here")
        return
    if mapped:
        run.warn(
            f"{at} ({name})",
            f"not mapped: {unmapped}; the route is matched on {mapped} alone",
        )
    else:
        run.warn(
            f"{at} ({name})",
            f"not mapped: {unmapped}; the route is chosen only by its name in 'model' "
            "(or as routing.default)",
        )


def _walk(node: Any, leaves: list, operators: set[str], *, negated: bool) -> None:
    if not isinstance(node, dict):
        return
    if node.get("type"):
        leaves.append((node, negated))
        return
    operator = str(node.get("operator", "AND")).upper()
    operators.add(operator)
    for child in node.get("conditions") or []:
        _walk(child, leaves, operators, negated=negated or operator == "NOT")


def _leaf_text(leaf: dict[str, Any], negated: bool) -> str:
    text = f"{leaf.get('type')} {leaf.get('name')}"
    return f"NOT {text}" if negated else text
