"""Conversational retrieval on HotpotQA dev500: does a follow-up question find what it needs?

The dev set (``bench/conversation_set.jsonl``, ``load_conversations``) holds hand-written
conversations over HotpotQA bridge questions: turn 1 asks for the bridge entity without naming
it, the assistant names it, and the follow-up refers back to it ("Who published it?"); its
target is the bridge entity's paragraph. ``written_out`` is the follow-up with its subject
spelled out by hand. ``switch`` conversations end in a self-contained question after an
unrelated exchange (or a greeting): resolution must cost them nothing. Only our own questions
and doc ids are stored; the corpus stays in ``../shared/data``.

``python -m bench.conversations [--split test] [--llm]`` indexes the corpus into a temporary
folder (``studio.evaluation.index_corpus``, vectors through the bench's embedding cache), builds
the graph on the embedded defaults and measures target recall@10 for the last turn alone, the
conversation as ``messages`` (LLM-free carry-over), the same conversation as a thread whose
earlier turns the graph answered itself, the conversation with SmolLM2 on llama.cpp writing the
standalone question (``--llm``), and the written-out question; then the switch cases' recall
beside their self-contained question's, the time resolution adds per turn, and checkpoint
bytes per turn of a 5-turn thread. It prints the tables and writes
``bench/CONVERSATION-RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SET_PATH = Path(__file__).with_name("conversation_set.jsonl")
RESULTS_PATH = Path(__file__).with_name("CONVERSATION-RESULTS.md")
OUT_DIR = Path(__file__).resolve().parent / "out"
CACHE_DIR = OUT_DIR / "cache"  # the harness's embedding cache (bench/embedding_cache.py)
K = 10
FIELDS = ("id", "split", "kind", "turns", "written_out", "targets")
KINDS = ("follow_up", "switch")
SPLITS = ("train", "test")
ROLES = ("user", "assistant")


# -- the dev set ------------------------------------------------------------------------------


class ConversationSetError(ValueError):
    """A row of the dev set that does not have the documented shape."""


def _check(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise ConversationSetError(f"{where}: expected an object")
    missing = [name for name in FIELDS if name not in row]
    if missing:
        raise ConversationSetError(f"{where}: missing {', '.join(missing)}")
    if row["kind"] not in KINDS or row["split"] not in SPLITS:
        raise ConversationSetError(f"{where}: kind must be {KINDS}, split {SPLITS}")
    turns = row["turns"]
    if not turns or not all(
        isinstance(t, dict) and t.get("role") in ROLES and str(t.get("content", "")).strip()
        for t in turns
    ):
        raise ConversationSetError(f"{where}: turns must be non-empty {{role, content}} items")
    if turns[-1]["role"] != "user" or len(turns) < 3:
        raise ConversationSetError(f"{where}: an earlier exchange, then the user's turn last")
    targets = row["targets"]
    if not targets or not all(isinstance(t, str) and t for t in targets):
        raise ConversationSetError(f"{where}: targets must be a non-empty list of doc ids")


def load_conversations(
    split: str | None = None, kind: str | None = None, path: str | os.PathLike = SET_PATH
) -> list[dict[str, Any]]:
    """The dev set's conversations (file order), optionally one ``split`` ("train": tune on
    these, "test": report) and one ``kind`` ("follow_up", "switch"). Each is ``{id, split,
    kind, turns: [{role, content}, ...] (the user's question last), written_out, targets}``;
    follow-ups also name their HotpotQA question (``source``). A malformed row raises
    ``ConversationSetError`` naming its line."""
    path = Path(path)
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            _check(row, f"{path.name} line {number}")
            if split in (None, row["split"]) and kind in (None, row["kind"]):
                rows.append(row)
    return rows


def last_turn(conversation: dict[str, Any]) -> str:
    return conversation["turns"][-1]["content"]


# -- measuring --------------------------------------------------------------------------------


def graph_accepts_messages() -> bool:
    """Whether the graph's request schema takes a conversation (``messages``)."""
    from parallel_rag.graph.state import RAGRequest

    return "messages" in RAGRequest.model_fields


def recall(ids: list[str], targets: list[str]) -> float:
    return sum(t in ids[:K] for t in targets) / len(targets)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def run(graph, request: dict[str, Any], config: dict | None = None) -> dict[str, Any]:
    """One graph run: the fused doc ids, the result, wall and CPU milliseconds."""
    from parallel_rag.studio.evaluation import ranked_doc_ids

    wall, cpu = time.perf_counter(), time.process_time()
    result = graph.invoke({**request, "top_k": K}, config)
    return {
        "ids": ranked_doc_ids(result["documents"]),
        "result": result,
        "wall_ms": (time.perf_counter() - wall) * 1000,
        "cpu_ms": (time.process_time() - cpu) * 1000,
    }


def score(record: dict[str, Any], row: str, conversation: dict, done: dict[str, Any]) -> None:
    """A row's recall, top ids and (for a conversation) what it retrieved on, in ``record``."""
    record[row] = recall(done["ids"], conversation["targets"])
    record[f"{row}_ids"] = done["ids"][:K]
    if "resolution" in done["result"]:
        record[f"{row}_on"] = done["result"]["resolution"]["retrieved_on"]


def replay_thread(graph, conversation: dict[str, Any], thread: str) -> dict[str, Any]:
    """The conversation's user turns sent one by one on a thread: the graph answers each
    earlier turn itself (its own answer, not the dev set's), the last one is measured."""
    config = {"configurable": {"thread_id": thread}}
    users = [t["content"] for t in conversation["turns"] if t["role"] == "user"]
    for text in users[:-1]:
        graph.invoke({"messages": [{"role": "user", "content": text}], "top_k": K}, config)
    return run(graph, {"messages": [{"role": "user", "content": users[-1]}]}, config)


def resolution_cost(conversations: list[dict[str, Any]], reps: int = 20) -> dict[str, float]:
    """The LLM-free resolution step alone (``resolve_conversation``, what the contextualize
    node runs): median wall and CPU microseconds per follow-up, each the median of ``reps``."""
    from parallel_rag.nodes.contextualize.history import coerce_messages
    from parallel_rag.nodes.contextualize.node import resolve_conversation

    walls, cpus = [], []
    for conversation in conversations:
        messages = coerce_messages(conversation["turns"], max_question_chars=10_000)
        wall, cpu = [], []
        for _ in range(reps):
            w, c = time.perf_counter(), time.thread_time()
            resolve_conversation(messages)
            cpu.append((time.thread_time() - c) * 1e6)
            wall.append((time.perf_counter() - w) * 1e6)
        walls.append(median(wall))
        cpus.append(median(cpu))
    return {"wall_us": median(walls), "cpu_us": median(cpus)}


LATENCY_REPS = 3


def latency_pass(graph, follow_ups: list[dict[str, Any]], reps: int = LATENCY_REPS) -> dict:
    """Per follow-up, the median wall and CPU ms of ``reps`` runs of each request, the four
    interleaved (so load drifts hit all alike) after one untimed run that puts every query
    vector in the caches: what is timed is the graph's own work (resolution, the extra view's
    branches, fusion), not encoding, which ``encode_cost`` measures. The follow-up as
    ``{query}`` against ``{messages}``; the first turn as ``{query}`` against a one-message
    conversation, whose rankings must be identical."""
    requests = {
        "last": lambda c: {"query": last_turn(c)},
        "conversation": lambda c: {"messages": c["turns"]},
        "first_query": lambda c: {"query": c["turns"][0]["content"]},
        "first_messages": lambda c: {"messages": c["turns"][:1]},
    }
    out: dict[str, Any] = {name: {"wall": [], "cpu": []} for name in requests}
    out["first_same"] = 0
    for c in follow_ups:
        warm = {name: run(graph, make(c))["ids"] for name, make in requests.items()}
        out["first_same"] += warm["first_query"] == warm["first_messages"]
        times: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in requests}
        for _ in range(reps):
            for name, make in requests.items():
                done = run(graph, make(c))
                times[name][0].append(done["wall_ms"])
                times[name][1].append(done["cpu_ms"])
        for name, (wall, cpu) in times.items():
            out[name]["wall"].append(median(wall))
            out[name]["cpu"].append(median(cpu))
    out["n"], out["reps"] = len(follow_ups), reps
    return out


def encode_cost(texts: list[str]) -> dict[str, float]:
    """One query encode on the product's own encoder (the bundled model's query path, below
    its query-vector cache, so every text is encoded): median wall and CPU ms. An unseen
    follow-up costs this once more than the same question as a query (two views to embed)."""
    from parallel_rag.backends.encoders.embeddings import BUNDLED, load_embeddings

    model = load_embeddings(BUNDLED)
    model = getattr(model, "inner", model)
    model.embed_query("warm up")
    walls, cpus = [], []
    for text in texts:
        wall, cpu = time.perf_counter(), time.process_time()
        model.embed_query(text)
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
    return {"wall_ms": median(walls), "cpu_ms": median(cpus)}


def checkpoint_bytes(graph_factory, conversations: list[dict[str, Any]], durability: str | None):
    """A 5-turn thread on a ``SqliteSaver`` file: per turn, the newest checkpoint's size
    (the state a resumed thread loads) and the bytes the turn stored (checkpoints with their
    metadata, and pending writes)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    users = [t["content"] for c in conversations for t in c["turns"] if t["role"] == "user"]
    rows, before = [], 0
    with tempfile.TemporaryDirectory(prefix="conv-ckpt-") as folder:
        connection = sqlite3.connect(str(Path(folder) / "threads.sqlite3"), check_same_thread=False)
        saver = SqliteSaver(connection)
        graph, config = graph_factory(saver), {"configurable": {"thread_id": "five-turns"}}
        extra = {"durability": durability} if durability else {}
        for number, question in enumerate(users[:5], 1):
            request = {"messages": [{"role": "user", "content": question}], "top_k": K}
            graph.invoke(request, config, **extra)
            connection.commit()
            newest = len(saver.serde.dumps_typed(saver.get_tuple(config).checkpoint)[1])
            stored = connection.execute(
                "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0)"
                " FROM checkpoints) + (SELECT coalesce(sum(length(value)), 0) FROM writes)"
            ).fetchone()[0]
            rows.append({"turn": number, "newest": newest, "added": stored - before})
            before = stored
        connection.close()
    return rows


def children_cpu_seconds() -> float:
    """CPU seconds of this process's children (the llama.cpp server), to the clock tick."""
    from bench.measure import tree_cpu_seconds

    return tree_cpu_seconds() - time.process_time()


def measure(conversations: list[dict[str, Any]], use_llm: bool, log=print) -> dict[str, Any]:
    """Every row's figures for ``conversations`` (see the module docstring)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from parallel_rag.graph.builder import build_graph
    from parallel_rag.graph.loading import default_config_dict, parse_config
    from parallel_rag.studio.evaluation import index_corpus

    from bench.data import load_hotpotqa
    from bench.embedding_cache import EmbeddingCache, installed
    from bench.pipelines import edge_reads_the_cache

    data = load_hotpotqa()
    follow_ups = [c for c in conversations if c["kind"] == "follow_up"]
    records = {
        c["id"]: {"id": c["id"], "split": c["split"], "kind": c["kind"]} for c in conversations
    }
    report: dict[str, Any] = {"records": records, "messages": graph_accepts_messages()}
    cache = EmbeddingCache(CACHE_DIR)
    with (
        tempfile.TemporaryDirectory(prefix="bench-conversations-") as folder,
        installed(cache) as cached,
        edge_reads_the_cache(cached),
    ):
        work = Path(folder)
        config = parse_config(default_config_dict())
        started = time.perf_counter()
        index_corpus(data.corpus, config, work)
        log(f"[index] {len(data.corpus)} paragraphs in {time.perf_counter() - started:.0f} s")
        graph = build_graph(config, base_dir=work)
        graph.invoke({"query": "warm up", "top_k": K})
        rows = {"last": lambda c: {"query": last_turn(c)},
                "written": lambda c: {"query": c["written_out"]}}  # fmt: skip
        if report["messages"]:
            rows["conversation"] = lambda c: {"messages": c["turns"]}
        for c in conversations:
            for row, request in rows.items():
                score(records[c["id"]], row, c, run(graph, request(c)))
        if not report["messages"]:
            log("[skip] the graph does not take `messages` yet: conversation rows left out")
            return report

        threaded = build_graph(config, base_dir=work, checkpointer=InMemorySaver())
        for c in conversations:
            score(records[c["id"]], "thread", c, replay_thread(threaded, c, f"thread-{c['id']}"))
        log("[run] threads replayed")

        report["latency"] = latency_pass(graph, follow_ups)
        report["encode"] = encode_cost([c["written_out"] for c in follow_ups])
        report["resolution_step"] = resolution_cost(follow_ups)

        def with_saver(saver):
            return build_graph(config, base_dir=work, checkpointer=saver)

        report["checkpoints"] = {
            name: checkpoint_bytes(with_saver, follow_ups, durability)
            for name, durability in (("every step", None), ("exit (the CLI's)", "exit"))
        }
        log("[run] latency and checkpoints measured")

        if use_llm:
            from bench.offline_llm import llama_server, offline_llm_available

            why_not = offline_llm_available()
            if why_not:
                log(f"[skip] --llm: {why_not}")
                return report
            OUT_DIR.mkdir(parents=True, exist_ok=True)
            with llama_server(OUT_DIR / "llama-conversations.log") as base_url:
                # the test suite's settings (tests/support/llm_fixtures.py)
                llm = {"model": "smollm2", "base_url": base_url, "temperature": 0,
                       "max_tokens": 200, "timeout_seconds": 120}  # fmt: skip
                settings = {**default_config_dict(), "conversation": {"llm": llm}}
                llm_graph = build_graph(parse_config(settings), base_dir=work)
                for number, c in enumerate(conversations, 1):
                    server_cpu = children_cpu_seconds()
                    done = run(llm_graph, {"messages": c["turns"]})
                    record = records[c["id"]]
                    score(record, "llm", c, done)
                    record["llm_ms"], record["llm_cpu_ms"] = done["wall_ms"], done["cpu_ms"]
                    record["llm_server_cpu_ms"] = (children_cpu_seconds() - server_cpu) * 1000
                    timings = done["result"].get("timings") or {}
                    record["llm_contextualize_ms"] = timings.get("contextualize")
                    if number % 20 == 0:
                        log(f"[llm] {number}/{len(conversations)} conversations")
            report["llm"] = True
    return report


# -- the report -------------------------------------------------------------------------------

FOLLOW_ROWS = {
    "last": "last turn alone, `{query: last}`",
    "conversation": "conversation, `{messages}` (LLM-free default)",
    "thread": "thread, earlier turns answered by the graph",
    "llm": "conversation, SmolLM2 writes the question",
    "written": "written out by hand, `{query: written_out}`",
    "conversation/written": "conversation ÷ written out",
    "conversation-last": "conversation − last turn alone",
    "thread-last": "thread − last turn alone",
    "llm/written": "SmolLM2 ÷ written out",
}
SWITCH_ROWS = {
    "written": "self-contained question alone",
    "conversation": "after the unrelated turns, `{messages}` (LLM-free)",
    "thread": "after the unrelated turns, thread",
    "llm": "after the unrelated turns, SmolLM2",
    "conversation/written": "LLM-free ÷ alone",
    "thread/written": "thread ÷ alone",
    "llm/written": "SmolLM2 ÷ alone",
}


def figure(records: list[dict], row: str) -> float | None:
    """A row's mean recall over ``records`` ("a/b", "a-b": two rows' ratio, difference)."""
    for op in "/-":
        if op in row:
            a, b = (figure(records, part) for part in row.split(op))
            if a is None or b is None or (op == "/" and not b):
                return None
            return a / b if op == "/" else a - b
    values = [r[row] for r in records if row in r]
    return sum(values) / len(values) if values and len(values) == len(records) else None


def recall_table(records: list[dict], rows: dict[str, str]) -> str:
    from bench.tables import cell, markdown_table

    groups = [(s, [r for r in records if r["split"] == s]) for s in SPLITS] + [("all", records)]
    groups = [(f"{name} ({len(rs)})", rs) for name, rs in groups if rs]
    body = [[label] + [cell(figure(rs, row)) for _, rs in groups] for row, label in rows.items()]
    return markdown_table([f"recall@{K}"] + [name for name, _ in groups], body)


def check_table(records: list[dict]) -> str:
    from bench.tables import markdown_table

    labels = ("both miss", "last turn alone finds it, written out misses",
              "written out finds it, last turn alone misses", "both find it")  # fmt: skip
    counts = [0] * 4
    for r in records:
        counts[(r["written"] > 0) * 2 + (r["last"] > 0)] += 1
    return markdown_table(
        ["follow-ups", "count"], [list(pair) for pair in zip(labels, counts, strict=True)]
    )


def latency_table(report: dict[str, Any]) -> str:
    from bench.tables import cell, markdown_table

    timed, step, encode = report["latency"], report["resolution_step"], report["encode"]

    def row(label: str, a: str, b: str | None = None) -> list[str]:
        cells = [label]
        for kind in ("wall", "cpu"):
            values = timed[a][kind] if b is None else [
                y - x for x, y in zip(timed[a][kind], timed[b][kind], strict=True)]  # fmt: skip
            cells.append(cell(median(values), 1))
        return cells

    rows = [
        row("follow-up as `{query: last}` (no resolution)", "last"),
        row("follow-up as `{messages}` (resolution + the follow_up view)", "conversation"),
        row("**added per follow-up** (median of paired differences)", "last", "conversation"),
        row("first turn as `{query}`", "first_query"),
        row("first turn as `{messages}` (one user message)", "first_messages"),
        row("**added on a first turn** (median of paired differences)", "first_query",
            "first_messages"),
        ["resolution step alone (`resolve_conversation`, LLM-free)",
         cell(step["wall_us"] / 1000, 3), cell(step["cpu_us"] / 1000, 3)],
        ["one query encode, bundled MiniLM (an unseen follow-up embeds two views)",
         cell(encode["wall_ms"], 1), cell(encode["cpu_ms"], 1)],
    ]  # fmt: skip
    if report.get("llm"):
        follow = [r for r in report["records"].values() if r["kind"] == "follow_up"]
        steps = [r["llm_contextualize_ms"] or 0 for r in follow]
        rows += [
            ["follow-up with SmolLM2, whole turn", cell(median([r["llm_ms"] for r in follow]), 1),
             cell(median([r["llm_cpu_ms"] for r in follow]), 1)],
            ["… of which the contextualize node (the model's call)", cell(median(steps), 1), ""],
            ["… and the llama.cpp server's CPU", "",
             cell(median([r["llm_server_cpu_ms"] for r in follow]), 0)],
        ]  # fmt: skip
    note = (
        f"\n\nMedians over the {timed['n']} follow-ups of each one's median of {timed['reps']} "
        "interleaved runs on cached query vectors (`latency_pass`). A first turn as `{messages}` "
        f"returned the same top {K} as `{{query}}` in {timed['first_same']} of {timed['n']}."
    )
    return markdown_table(["per turn, median", "wall ms", "CPU ms"], rows) + note


def checkpoint_table(report: dict[str, Any]) -> str:
    from bench.tables import markdown_table

    runs = report["checkpoints"]
    headers = ["turn"] + [f"{what}, {name}" for name in runs
                          for what in ("newest checkpoint", "stored by the turn")]  # fmt: skip
    rows = [
        [str(i + 1)]
        + [f"{turns[i][key]:,}" for turns in runs.values() for key in ("newest", "added")]
        for i in range(len(next(iter(runs.values()))))
    ]
    return markdown_table(headers, rows)


def render(report: dict[str, Any], conversations: list[dict], command: str, seconds: float) -> str:
    records = list(report["records"].values())
    follow = [r for r in records if r["kind"] == "follow_up"]
    switch = [r for r in records if r["kind"] == "switch"]
    same = ", ".join(
        f"{row} {sum(r[f'{row}_ids'] == r['written_ids'] for r in switch)} of {len(switch)}"
        for row in ("conversation", "thread", "llm")
        if switch and row in switch[0]
    )
    by_id = {c["id"]: c for c in conversations}
    missed = [r for r in follow if r["written"] and not r.get("conversation", 1)]
    misses = [
        f"- {r['id']}: {last_turn(by_id[r['id']])!r} -> {r['conversation_on']!r}"
        for r in missed
        if r["split"] == "train"
    ] + [f"- and {sum(r['split'] == 'test' for r in missed)} in test (not listed: report set)"]
    parts = [
        f"`{command}` · {time.strftime('%Y-%m-%d')} · {seconds:.0f} s wall · "
        f"load {os.getloadavg()[1]:.1f} · embedded defaults (BM25 + Qdrant Edge), no reranker",
        f"### Follow-ups: target recall@{K}\n\n" + recall_table(follow, FOLLOW_ROWS),
        "### Switches and greetings: the self-contained question keeps its recall\n\n"
        + recall_table(switch, SWITCH_ROWS)
        + f"\n\nTop {K} identical to the question alone's: {same}.",
        "### The set's check: does the follow-up depend on the earlier turn?\n\n"
        + check_table(follow),
    ]
    if report.get("latency"):
        parts += [
            "### Time resolution adds per turn\n\n" + latency_table(report),
            "### Checkpoint bytes per turn (5-turn thread, `SqliteSaver`)\n\n"
            + checkpoint_table(report),
            "### Follow-ups the written-out question finds and the conversation misses\n\n"
            + "\n".join(misses),
        ]
    return "\n\n".join(parts) + "\n"


MARKER = "<!-- below: written by python -m bench.conversations; above: kept -->"
RESULTS_HEADER = f"""# Conversations: does a follow-up find what it needs? (issue 49)

Target recall@10 on the hand-written conversational dev set `bench/conversation_set.jsonl`;
how it was written is in `bench/conversations.py`'s docstring.

{MARKER}
"""


def write_results(text: str) -> None:
    """The results file: what is above the marker kept (the reading of the figures), the
    tables below it replaced."""
    old = RESULTS_PATH.read_text(encoding="utf-8") if RESULTS_PATH.is_file() else ""
    head = old[: old.index(MARKER) + len(MARKER)] + "\n" if MARKER in old else RESULTS_HEADER
    RESULTS_PATH.write_text(head + "\n" + text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.conversations", description=__doc__)
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="all")
    parser.add_argument("--llm", action="store_true", help="also SmolLM2 on llama.cpp")
    parser.add_argument("--limit", type=int, help="the first N conversations of each kind")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS_PATH.name}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    conversations = load_conversations(split=None if args.split == "all" else args.split)
    if args.limit:
        conversations = [
            c
            for kind in KINDS
            for c in [c for c in conversations if c["kind"] == kind][: args.limit]
        ]
    report = measure(conversations, args.llm)
    command = (
        "python -m bench.conversations"
        + (f" --split {args.split}" if args.split != "all" else "")
        + (f" --limit {args.limit}" if args.limit else "")
        + (" --llm" if args.llm else "")
    )
    text = render(report, conversations, command, time.perf_counter() - started)
    print(text)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "conversations.json").write_text(json.dumps(report, indent=1, default=str))
    if not args.no_write:
        write_results(text)


if __name__ == "__main__":
    main()
