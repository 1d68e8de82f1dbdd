"""The tables of ``bench/conversations.py``: follow-up and switch recall@10 per split with
the ratios issue 49 asks for, the dev set's own check (does the written-out question find the
target more often than the last turn alone?), the time resolution adds per turn and checkpoint
bytes per turn, rendered as the Markdown of ``bench/CONVERSATION-RESULTS.md``."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.conversations import SPLITS, K, last_turn, median

FOLLOW_ROWS = (
    ("last", "last turn alone, `{query: last}`"),
    ("conversation", "conversation, `{messages}` (LLM-free default)"),
    ("thread", "thread, earlier turns answered by the graph"),
    ("llm", "conversation, SmolLM2 writes the question"),
    ("written", "written out by hand, `{query: written_out}`"),
)
SWITCH_ROWS = (
    ("written", "self-contained question alone"),
    ("conversation", "after the unrelated turns, `{messages}` (LLM-free)"),
    ("thread", "after the unrelated turns, thread"),
    ("llm", "after the unrelated turns, SmolLM2"),
)


def mean_of(records: list[dict], row: str) -> float | None:
    values = [r[row] for r in records if row in r]
    return sum(values) / len(values) if values and len(values) == len(records) else None


def _groups(records: list[dict]) -> list[tuple[str, list[dict]]]:
    groups = [(s, [r for r in records if r["split"] == s]) for s in SPLITS]
    return [(f"{name} ({len(rs)})", rs) for name, rs in groups + [("all", records)] if rs]


def recall_table(records: list[dict], rows, derived) -> str:
    from bench.tables import cell, markdown_table

    groups = _groups(records)
    body = [[label] + [cell(mean_of(rs, row)) for _, rs in groups] for row, label in rows]
    for label, numerator, denominator, op in derived:
        line = [label]
        for _, rs in groups:
            a, b = mean_of(rs, numerator), mean_of(rs, denominator)
            ok = a is not None and b is not None and (op == "-" or b > 0)
            line.append(cell((a - b if op == "-" else a / b) if ok else None))
        body.append(line)
    return markdown_table([f"recall@{K}"] + [name for name, _ in groups], body)


def check_table(records: list[dict]) -> str:
    from bench.tables import markdown_table

    counts = {"written out finds it, last turn alone misses": 0, "both find it": 0,
              "both miss": 0, "last turn alone finds it, written out misses": 0}  # fmt: skip
    keys = list(counts)
    for r in records:
        w, a = r["written"] > 0, r["last"] > 0
        counts[keys[0 if w and not a else 1 if w else 3 if a else 2]] += 1
    return markdown_table(["follow-ups", "count"], [[k, v] for k, v in counts.items()])


def latency_table(report: dict[str, Any]) -> str:
    from bench.tables import cell, markdown_table

    timed = report.get("latency")
    if not timed:
        return "(the graph does not take `messages`: nothing to time)"

    def paired(a: str, b: str, kind: str) -> list[float]:
        return [y - x for x, y in zip(timed[a][kind], timed[b][kind], strict=True)]

    def row(label: str, wall: list[float], cpu: list[float], digits: int = 1) -> list[str]:
        return [label, cell(median(wall), digits), cell(median(cpu), digits)]

    rows = [
        row("follow-up as `{query: last}` (no resolution)", timed["last"]["wall"],
            timed["last"]["cpu"]),
        row("follow-up as `{messages}` (resolution + the follow_up view)",
            timed["conversation"]["wall"], timed["conversation"]["cpu"]),
        row("**added per follow-up** (median of paired differences)",
            paired("last", "conversation", "wall"), paired("last", "conversation", "cpu")),
        row("first turn as `{query}`", timed["first_query"]["wall"], timed["first_query"]["cpu"]),
        row("first turn as `{messages}` (one user message)", timed["first_messages"]["wall"],
            timed["first_messages"]["cpu"]),
        row("**added on a first turn** (median of paired differences)",
            paired("first_query", "first_messages", "wall"),
            paired("first_query", "first_messages", "cpu")),
    ]  # fmt: skip
    step, encode = report["resolution_step"], report["encode"]
    rows.append(["resolution step alone (`resolve_conversation`, LLM-free)",
                 cell(step["wall_us"] / 1000, 3), cell(step["cpu_us"] / 1000, 3)])  # fmt: skip
    label = "one query encode (bundled MiniLM, below its cache): an unseen follow-up embeds two"
    rows.append([label, cell(encode["wall_ms"], 1), cell(encode["cpu_ms"], 1)])
    follow = [r for r in report["records"].values() if r["kind"] == "follow_up"]
    if report.get("llm"):
        rows.append(
            row(
                "follow-up with SmolLM2, whole turn (CPU: this process)",
                [r["llm_ms"] for r in follow],
                [r["llm_cpu_ms"] for r in follow],
            )
        )
        steps = [r["llm_contextualize_ms"] for r in follow if r.get("llm_contextualize_ms")]
        rows.append(["… its contextualize node (the model's call)", cell(median(steps), 1), ""])
        rows.append(["… and the llama.cpp server's CPU", "",
                     cell(median([r["llm_server_cpu_ms"] for r in follow]), 0)])  # fmt: skip
    note = (
        f"\n\nEach figure is the median over the {timed['n']} follow-ups of a follow-up's "
        f"median of {timed['reps']} interleaved runs, query vectors cached "
        f"(see `latency_pass`). First turn: the same top {K} as `{{query}}` in "
        f"{timed['first_same']} of {timed['n']}."
    )
    return markdown_table(["per turn, median", "wall ms", "CPU ms"], rows) + note


def switch_identity(records: list[dict]) -> str:
    """How often the switch's top 10 is exactly the self-contained question's."""
    parts = []
    for row, label in (("conversation", "LLM-free"), ("thread", "thread"), ("llm", "SmolLM2")):
        have = [r for r in records if f"{row}_ids" in r]
        if have:
            same = sum(r[f"{row}_ids"] == r["written_ids"] for r in have)
            parts.append(f"{label} {same} of {len(have)}")
    return "Top 10 identical to the question alone's: " + ", ".join(parts) + "."


def checkpoint_table(report: dict[str, Any]) -> str:
    from bench.tables import markdown_table

    runs = report.get("checkpoints")
    if not runs:
        return "(no checkpointer run)"
    headers, rows = ["turn"], []
    for name in runs:
        headers += [f"newest checkpoint, {name}", f"stored by the turn, {name}"]
    for index in range(len(next(iter(runs.values())))):
        line = [str(index + 1)]
        for turns in runs.values():
            line += [f"{turns[index]['newest']:,}", f"{turns[index]['added']:,}"]
        rows.append(line)
    return markdown_table(headers, rows)


def misses(records: list[dict], conversations: dict[str, dict]) -> str:
    """Train follow-ups the written-out question finds and the conversation does not (test
    ones only counted: tuning reads train)."""
    lines = []
    for r in records:
        if r["kind"] != "follow_up" or r["written"] == 0 or r.get("conversation", 1) > 0:
            continue
        if r["split"] == "train":
            c = conversations[r["id"]]
            lines.append(f"- {r['id']}: {last_turn(c)!r} -> retrieved on {r['retrieved_on']!r}")
    return "\n".join(lines) or "- none"


def render(report: dict[str, Any], conversations: list[dict], command: str, seconds: float) -> str:
    records = list(report["records"].values())
    follow = [r for r in records if r["kind"] == "follow_up"]
    switch = [r for r in records if r["kind"] == "switch"]
    derived = (("conversation ÷ written out", "conversation", "written", "/"),
               ("conversation − last turn alone", "conversation", "last", "-"),
               ("thread − last turn alone", "thread", "last", "-"),
               ("SmolLM2 ÷ written out", "llm", "written", "/"))  # fmt: skip
    switch_derived = (("after unrelated turns ÷ alone (LLM-free)", "conversation", "written", "/"),
                      ("thread ÷ alone", "thread", "written", "/"),
                      ("SmolLM2 ÷ alone", "llm", "written", "/"))  # fmt: skip
    by_id = {c["id"]: c for c in conversations}
    parts = [
        f"`{command}` · {time.strftime('%Y-%m-%d')} · {seconds:.0f} s wall · "
        f"load {os.getloadavg()[1]:.1f} · embedded defaults (BM25 + Qdrant Edge), no reranker",
        f"### Follow-ups: target recall@{K}\n\n" + recall_table(follow, FOLLOW_ROWS, derived),
        "### Switches and greetings: the self-contained question keeps its recall\n\n"
        + recall_table(switch, SWITCH_ROWS, switch_derived)
        + "\n\n"
        + switch_identity(switch),
        "### The set's check: does the follow-up depend on the earlier turn?\n\n"
        + check_table(follow),
        "### Time resolution adds per turn\n\n" + latency_table(report),
        "### Checkpoint bytes per turn (5-turn thread, `SqliteSaver`)\n\n"
        + checkpoint_table(report),
        "### Train follow-ups the written-out question finds and the conversation misses\n\n"
        + misses(records, by_id),
    ]
    return "\n\n".join(parts) + "\n"


RESULTS_HEADER = """# Conversations: does a follow-up find what it needs? (issue 49)

Target recall@10 on the hand-written conversational dev set `bench/conversation_set.jsonl`
(HotpotQA dev500 bridge questions; tune on `train`, report `test`), from
`python -m bench.conversations`; how the set was written is in that module's docstring.

"""
