"""Conversations for real: threads kept by the CLI in SQLite across processes, the interactive
``chat``, and follow-ups written out by a real chat model (SmolLM2 on llama.cpp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "parallel_rag.studio.cli"]
FIRST = "Which bridge collapsed in 1940?"
FOLLOW_UP = "When did it open?"


def _run(args: list[str], cwd, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PARALLEL_RAG_CONFIG", None)
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600
    )


def _top_source(result: dict) -> str:
    return result["documents"][0]["metadata"]["source"]


def test_ask_thread_resumes_in_a_new_process(example_index):
    _, base_dir, _ = example_index
    first = _run(["ask", "--thread", "bridges", FIRST, "--json", "--no-progress"], base_dir)
    assert first.returncode == 0, first.stderr
    assert "tacoma-narrows" in _top_source(json.loads(first.stdout))

    alone = _run(["ask", FOLLOW_UP, "--json", "--no-progress"], base_dir)  # no thread
    assert "tacoma-narrows" not in _top_source(json.loads(alone.stdout))

    second = _run(["ask", "--thread", "bridges", FOLLOW_UP, "--json", "--no-progress"], base_dir)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["resolution"]["method"] == "carry_over"
    assert "tacoma-narrows" in _top_source(result)
    assert [m["role"] for m in result["messages"]] == ["user", "assistant"] * 2
    assert result["messages"][0]["content"] == FIRST

    threads = base_dir / ".parallel-rag" / "threads.sqlite3"
    with SqliteSaver.from_conn_string(str(threads)) as saver:
        state = saver.get_tuple({"configurable": {"thread_id": "bridges"}}).checkpoint
    values = state["channel_values"]
    assert len(values["messages"]) == 4
    assert len(values["branch_results"]) == len(result["branches"])  # one turn's, not two


def test_chat_is_a_conversation_in_the_terminal(example_index):
    _, base_dir, _ = example_index
    chat = _run(["chat", "--no-progress"], base_dir, stdin=f"{FIRST}\n{FOLLOW_UP}\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.startswith("thread chat-")
    assert chat.stdout.count("Sources:") == 2
    assert "(retrieved on: When did Tacoma Narrows Bridge open?)" in chat.stdout
    bad = _run(["ask", "--thread", "no spaces allowed", FIRST], base_dir)
    assert bad.returncode == 1 and "--thread" in bad.stderr


def test_a_real_chat_model_writes_the_follow_up_out(example_index, llm_settings):
    from langgraph.checkpoint.memory import InMemorySaver
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.configuration import ConversationConfig

    config, base_dir, _ = example_index
    talking = config.model_copy(
        update={"conversation": ConversationConfig.model_validate({"llm": llm_settings})}
    )
    graph = build_graph(talking, base_dir=base_dir, checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "smollm2"}}
    first = graph.invoke({"query": FIRST}, thread)
    assert first["resolution"]["method"] == "as_written"  # never called on a first turn
    second = graph.invoke({"query": FOLLOW_UP}, thread)
    resolution = second["resolution"]
    assert resolution["method"] == "chat_model", resolution
    assert resolution["retrieved_on"] and resolution["retrieved_on"] != FOLLOW_UP
    assert {"text": FOLLOW_UP, "kind": "follow_up"} in second["queries"]
