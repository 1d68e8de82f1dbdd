"""One factory for chat models: a provider string via ``init_chat_model``, or any
OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio) through ``ChatOpenAI``."""

from __future__ import annotations

from typing import Literal

from langchain_core.language_models import BaseChatModel
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
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=settings.model,
            base_url=settings.base_url,
            api_key=settings.api_key or SecretStr("not-needed"),
            **common,
        )
    from langchain.chat_models import init_chat_model

    extra = {"api_key": settings.api_key.get_secret_value()} if settings.api_key else {}
    return init_chat_model(settings.model, **common, **extra)
