"""The conversational dev set (``bench/conversation_set.jsonl``, issue 49) has the shape its
bench and the graph's tests read: each conversation ends in the user's question, a follow-up
is written out by hand differently from its last turn, the targets are HotpotQA dev500
paragraphs, and a malformed row is refused with its line named."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

# bench/ is not an installed package: load the one module (at import it needs only the stdlib)
_SOURCE = Path(__file__).resolve().parents[2] / "bench" / "conversations.py"
_SPEC = importlib.util.spec_from_file_location("bench_conversations", _SOURCE)
conversations = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conversations)
DATA = Path(os.environ.get("PARALLEL_RAG_DATA") or _SOURCE.parents[2] / "shared" / "data")
CORPUS = DATA / "hotpotqa-dev500" / "corpus.jsonl"  # where bench/data.py reads it


def test_the_set_holds_follow_ups_switches_and_a_train_split():
    rows = conversations.load_conversations()
    follow_ups = [r for r in rows if r["kind"] == "follow_up"]
    assert len(follow_ups) == 80
    assert [r["split"] for r in follow_ups] == ["train"] * 30 + ["test"] * 50
    assert len([r for r in rows if r["kind"] == "switch"]) >= 25
    assert len({r["id"] for r in rows}) == len(rows)
    assert conversations.load_conversations(split="test", kind="switch")
    for row in follow_ups:
        assert row["turns"][-1]["role"] == "user"
        assert conversations.last_turn(row) != row["written_out"], row["id"]
    for row in rows:
        if row["kind"] == "switch":  # the question names its own subject
            assert conversations.last_turn(row) == row["written_out"], row["id"]


@pytest.mark.skipif(not CORPUS.is_file(), reason="../shared/data/hotpotqa-dev500 not present")
def test_every_target_is_a_hotpotqa_paragraph():
    with open(CORPUS, encoding="utf-8") as handle:
        ids = {json.loads(line)["_id"] for line in handle if line.strip()}
    missing = [
        (row["id"], target)
        for row in conversations.load_conversations()
        for target in row["targets"]
        if target not in ids
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"turns": [{"role": "user", "content": "Who published it?"}]}, "earlier exchange"),
        ({"targets": []}, "targets"),
        ({"kind": "chit-chat"}, "kind"),
        ({"turns": [{"role": "system", "content": "x"}] * 3}, "turns"),
    ],
)
def test_a_malformed_row_is_refused_with_its_line(tmp_path, change, message):
    good = conversations.load_conversations()[0]
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **change}) + "\n")
    with pytest.raises(conversations.ConversationSetError, match=f"line 2: .*{message}"):
        conversations.load_conversations(path=path)
