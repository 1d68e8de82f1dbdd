"""The tables and the results file of ``python -m bench.conversations``: target recall per row
and split, the set's own check, the time resolution adds per turn, checkpoint bytes per turn,
and ``bench/CONVERSATION-RESULTS.md`` with what is written above its marker kept."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.conversations import RESULTS_PATH, SPLITS, K, last_turn, median

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
