"""vLLM Semantic Router's ``providers`` section mapped onto this router's upstreams.

Upstream names the servers behind each model under ``providers.models[].backend_refs[]``
(``endpoint`` + ``protocol``, or ``base_url``; ``weight``; a key in ``api_key`` or
``api_key_env``) and the model for unmatched requests under
``providers.defaults.default_model``. Here a decision forwards to one upstream
(``upstream: {base_url, api_key | api_key_env}``), so:

- each provider model becomes the upstream of every decision whose ``model`` names it, unless
  the file also has our top-level ``upstream`` (ours wins: it is the line a user added);
- of several ``backend_refs`` the heaviest is used (ties: the first; upstream's missing weight
  counts as 1, as its loader counts it) and the others are listed: there is no weighted
  balancing here;
- the name sent to that server is upstream's: ``external_model_ids[<ref type>]`` (the ref's
  ``type``, else its ``provider``, else ``vllm``), else ``provider_model_id`` when the model has
  no ``external_model_ids``, else the model's own name;
- an endpoint ref's URL is ``<protocol>://<endpoint>/v1`` (upstream's proxy passes the client's
  ``/v1/chat/completions`` path through to it), a ``base_url`` ref's is its ``base_url``;
- ``default_model`` becomes a plain route of that name, made ``routing.default`` when the file
  sets none (upstream forwards an unmatched request to it);
- what has no counterpart (pricing, reliability, reasoning families, extra headers, another
  auth header or chat path, a non-OpenAI ``api_format``...) is listed at start-up.

docs/migrating-from-semantic-router.md has the table; the translation that calls these
functions is ``semantic_router_compat.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the compat module imports this one
    from parallel_rag.studio.router.semantic_router_compat import Translation

MODEL_KEYS_USED = ("name", "provider_model_id", "external_model_ids", "backend_refs")
REF_KEYS_USED = ("name", "endpoint", "protocol", "base_url", "weight", "type", "provider")
REF_KEYS_USED += ("api_key", "api_key_env")
OPENAI_FORMATS = (None, "", "openai")
ROUTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # configuration.ROUTE_NAME


@dataclass
class ProviderModel:
    """A provider model as a route's upstream: the override and the model name it is sent."""

    upstream: dict[str, Any]
    model: str


def provider_models(providers: Any, run: Translation) -> None:
    """Read ``providers`` into ``run.models`` (name -> ``ProviderModel``) and
    ``run.default_model``, listing what cannot map."""
    if not isinstance(providers, dict):
        run.warn("providers", "not a mapping, ignored")
        return
    defaults = providers.get("defaults")
    if isinstance(defaults, dict):
        default = defaults.get("default_model")
        if isinstance(default, str) and default:
            run.default_model = default
        others = sorted(k for k in defaults if k != "default_model")
        if others:
            run.warn("providers.defaults", f"ignored: {', '.join(others)}")
    models = providers.get("models")
    models = models if isinstance(models, list) else []
    for index, model in enumerate(models):
        if isinstance(model, dict) and isinstance(model.get("name"), str):
            where = f"providers.models.{index} ({model['name']})"
            mapped = _model(model, where, run)
            if mapped is not None:
                run.models[model["name"]] = mapped
    other = sorted(k for k in providers if k not in ("defaults", "models"))
    if other:
        run.warn("providers", f"ignored: {', '.join(other)}")
    if run.top_upstream and run.models:
        run.warn(
            "providers.models",
            f"backend_refs of {sorted(run.models)} not used: the top-level upstream serves "
            "every decision that has no upstream of its own",
        )
        run.models.clear()


def _model(model: dict[str, Any], where: str, run: Translation) -> ProviderModel | None:
    ignored = sorted(k for k in model if k not in (*MODEL_KEYS_USED, "api_format"))
    if ignored:
        run.warn(where, f"ignored: {', '.join(ignored)}")
    if model.get("api_format") not in OPENAI_FORMATS:
        run.warn(
            f"{where}.api_format",
            f"{model['api_format']!r}: requests are forwarded as OpenAI chat completions; "
            "the server must accept them",
        )
    refs = model.get("backend_refs")
    usable = []
    for index, ref in enumerate(refs if isinstance(refs, list) else []):
        if isinstance(ref, dict) and (ref.get("base_url") or ref.get("endpoint")):
            usable.append((index, ref))
        else:
            run.warn(f"{where}.backend_refs.{index}", "no endpoint or base_url, ignored")
    if not usable:
        return None
    # the heaviest ref (upstream counts a missing weight as 1); max keeps the first of a tie
    index, ref = max(usable, key=lambda item: _weight(item[1]))
    at = f"{where}.backend_refs.{index}"
    if len(usable) > 1:
        others = [f"{_ref_name(r, i)} (weight {_weight(r)})" for i, r in usable if r is not ref]
        run.warn(
            f"{where}.backend_refs",
            f"no weighted balancing here: every request goes to {_ref_name(ref, index)} "
            f"(weight {_weight(ref)}); not used: {', '.join(others)}",
        )
    upstream = {"base_url": _base_url(ref)}
    if ref.get("api_key"):
        upstream["api_key"] = ref["api_key"]
    elif ref.get("api_key_env"):
        upstream["api_key_env"] = ref["api_key_env"]
    _ref_notes(ref, at, run)
    return ProviderModel(upstream, _sent_name(model, ref))


def _weight(ref: dict[str, Any]) -> int:
    weight = ref.get("weight")
    return weight if isinstance(weight, int) and weight > 0 else 1


def _ref_name(ref: dict[str, Any], index: int) -> str:
    return repr(ref.get("name") or f"backend_refs.{index}")


def _base_url(ref: dict[str, Any]) -> str:
    if ref.get("base_url"):
        return str(ref["base_url"]).rstrip("/")
    endpoint = str(ref["endpoint"]).strip()
    protocol = str(ref.get("protocol") or "http").lower()
    if "://" in endpoint:
        protocol, endpoint = endpoint.split("://", 1)
    return f"{protocol}://{endpoint.split('/', 1)[0]}/v1"


def _sent_name(model: dict[str, Any], ref: dict[str, Any]) -> str:
    ref_type = ref.get("type") or ref.get("provider") or "vllm"
    ids = model.get("external_model_ids")
    if isinstance(ids, dict) and ids:
        return str(ids.get(ref_type) or model["name"])
    return str(model.get("provider_model_id") or model["name"])


def _ref_notes(ref: dict[str, Any], at: str, run: Translation) -> None:
    header, prefix = ref.get("auth_header"), ref.get("auth_prefix")
    if header not in (None, "", "Authorization") or prefix not in (None, "", "Bearer"):
        run.warn(
            at,
            f"the key is sent as 'Authorization: Bearer KEY', not in {header or 'Authorization'}"
            f" with prefix {prefix!r}",
        )
    chat_path = ref.get("chat_path")
    if chat_path not in (None, "", "/chat/completions"):
        run.warn(f"{at}.chat_path", f"{chat_path!r}: requests go to <base_url>/chat/completions")
    provider = ref.get("provider")
    if provider not in (None, "", "openai", "vllm"):
        run.warn(
            f"{at}.provider",
            f"{provider!r}: requests are forwarded as OpenAI chat completions; the server must "
            "accept them",
        )
    handled = (*REF_KEYS_USED, "auth_header", "auth_prefix", "chat_path")
    ignored = sorted(k for k in ref if k not in handled)
    if ignored:
        run.warn(at, f"ignored: {', '.join(ignored)}")


def decision_upstream(decision: dict[str, Any], run: Translation) -> None:
    """A decision without an upstream of its own forwards to its model's backend ref."""
    mapped = run.models.get(decision.get("model"))  # type: ignore[arg-type]
    if mapped is None or "upstream" in decision:
        return
    decision["upstream"] = dict(mapped.upstream)
    decision["model"] = mapped.model


def default_route(routing: dict[str, Any], run: Translation) -> None:
    """``providers.defaults.default_model`` as a plain route and, when the file names no
    ``routing.default``, the default (what upstream does with an unmatched request)."""
    name = run.default_model
    decisions = routing.get("decisions")
    if name is None or not isinstance(decisions, list):
        return
    where = "providers.defaults.default_model"
    names = {d.get("name") for d in decisions if isinstance(d, dict)}
    if name in names:
        run.warn(where, f"{name!r} is also a decision's name; no route added for it")
        return
    if not ROUTE_NAME.match(name):
        run.warn(where, f"{name!r} cannot be a route name here; no route added for it")
        return
    route: dict[str, Any] = {
        "name": name,
        "model": name,
        "description": "providers.defaults.default_model",
        "match_description": False,
    }
    decision_upstream(route, run)
    if "upstream" not in route and not run.top_upstream:
        run.warn(where, f"{name!r} has no backend_refs and there is no upstream; no route added")
        return
    decisions.append(route)
    if routing.get("default") is None:
        routing["default"] = name
        run.warn(where, f"a plain route {name!r} is added and is routing.default")
    else:
        run.warn(where, f"a plain route {name!r} is added (routing.default stays as written)")
