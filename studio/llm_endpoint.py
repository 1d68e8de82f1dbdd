"""The CLI's ``--llm URL [--model M] [--rewriter K]`` override: the configuration with its
generator (and optionally a rewriter) on an OpenAI-compatible endpoint. Without ``--model`` it
asks the server for its models, so it makes a network call."""

from __future__ import annotations

from parallel_rag.graph.configuration import ConfigError, PipelineConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.chat_models import normalize_base_url, served_model_name

LLM_ENDPOINT_MAX_TOKENS = 512


def with_llm_endpoint(
    config: PipelineConfig,
    base_url: str | None = None,
    *,
    model: str | None = None,
    rewriter_kind: str | None = None,
) -> PipelineConfig:
    """The config with its generator (and, given ``rewriter_kind``, a rewriter) on an
    OpenAI-compatible endpoint: what ``parallel-rag ask --llm URL [--model M] [--rewriter K]``
    runs. Without ``model`` the server's first listed model is used. Other ``llm`` settings of
    the config (api_key, temperature, max_tokens, timeouts) are kept; ``max_tokens`` defaults
    to ``LLM_ENDPOINT_MAX_TOKENS`` so a small local model cannot ramble to its context limit."""
    if model is not None and base_url is None:
        raise ConfigError("--model: only applies together with --llm URL")
    data = config.model_dump(exclude_unset=True)
    generator = dict(data.get("generator") or {})
    llm = generator.get("llm")
    if base_url is not None:
        url = normalize_base_url(base_url)
        kept = {k: v for k, v in (llm or {}).items() if k not in {"model", "base_url", "provider"}}
        key = kept.get("api_key")
        secret = key.get_secret_value() if hasattr(key, "get_secret_value") else key
        llm = {
            "max_tokens": LLM_ENDPOINT_MAX_TOKENS,
            **kept,
            "model": model or served_model_name(url, api_key=secret),
            "base_url": url,
        }
        data["generator"] = {**generator, "kind": "llm", "llm": llm}
    if rewriter_kind is not None:
        rewriter = dict(data.get("rewriter") or {})
        rewriter_llm = llm if base_url is not None else rewriter.get("llm") or llm
        if rewriter_llm is None:
            raise ConfigError(
                "--rewriter: needs --llm URL, or rewriter.llm/generator.llm in the config"
            )
        data["rewriter"] = {**rewriter, "kind": rewriter_kind, "llm": rewriter_llm}
    return parse_config(data, source="configuration with --llm/--rewriter")
