"""The ``cross_encoder`` scorer on a real (small) cross-encoder built in a fixture.

No package ships cross-encoder weights, so the fixture builds one from the packaged
all-MiniLM-L6-v2 backbone with a fresh one-logit head, trained in a few seconds as a linear
probe on frozen pair features of a dozen hand-made (query, passage) pairs, jointly at three exits
(full; layer 3; dimension 192) that its ``pair_scorer.json`` then declares. At full depth and
at width 192 its scores rank held-out queries' passages correctly (at layer 3 the shared probe
head is weak), which is all these tests need: loading, budgets, layer/dimension checks,
batching, ordering, ties, one load per process.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from parallel_rag.backends.base import scored_document
from parallel_rag.backends.encoders.embeddings import bundled_model_path
from parallel_rag.graph import ConfigError, build_graph
from parallel_rag.graph.components import make_scorer
from parallel_rag.graph.configuration import RerankerConfig
from parallel_rag.nodes.rerank.cross_encoder import (
    EXITS_FILE,
    CrossEncoderScorer,
    load_cross_encoder,
)
from parallel_rag.nodes.rerank.scorers import QueryOverBudgetError, TokenBudgetError

pytestmark = pytest.mark.integration

TRAINING = [
    ("How do vaccines train the immune system?",
     "Vaccines expose the immune system to a harmless antigen so it builds memory cells."),
    ("What causes ocean tides?",
     "Tides are caused by the gravitational pull of the Moon and the Sun on the oceans."),
    ("How does photosynthesis make sugar?",
     "Photosynthesis uses light to turn carbon dioxide and water into glucose."),
    ("Why is the sky blue?",
     "Sunlight is scattered by air molecules, and blue light scatters more than red light."),
    ("How do bees make honey?",
     "Bees collect nectar, add enzymes and evaporate the water in the hive to make honey."),
    ("What does a compiler do?",
     "A compiler translates source code in a programming language into machine code."),
    ("How do earthquakes start?",
     "Earthquakes start when stress along a fault is released as rocks suddenly slip."),
    ("What is inflation in economics?",
     "Inflation is the rate at which the general level of prices for goods rises."),
    ("How do plants absorb water?",
     "Plant roots absorb water from the soil through root hairs by osmosis."),
    ("What powers the Sun?",
     "The Sun is powered by nuclear fusion of hydrogen into helium in its core."),
    ("How does a refrigerator keep food cold?",
     "A refrigerator pumps refrigerant that absorbs heat inside and releases it outside."),
    ("Why do leaves change color in autumn?",
     "In autumn chlorophyll breaks down, revealing yellow and orange pigments in leaves."),
]  # fmt: skip
HELD_OUT = [
    ("Why do tides rise and fall?", [
        "Honey is made by bees from flower nectar.",
        "The Moon's gravity pulls on the ocean and causes high and low tides.",
        "A compiler turns code into machine instructions.",
    ]),
    ("how is honey produced", [
        "Tides come from the Moon.",
        "Inflation raises prices.",
        "Bees turn nectar into honey inside the hive.",
    ]),
    ("what makes the sky look blue", [
        "Earthquakes happen on faults.",
        "Blue light is scattered by the atmosphere more than red light.",
        "Vaccines create antibodies.",
    ]),
]  # fmt: skip
RELEVANT = {0: 1, 1: 2, 2: 1}  # held-out query -> index of its relevant passage
EXITS = [{"layer": 3, "dimension": 384}, {"layer": 6, "dimension": 192}]


def build_probe_cross_encoder(folder: Path) -> Path:
    """MiniLM backbone + a fresh 1-logit head fitted on frozen features at every declared exit."""
    import torch
    import torch.nn.functional as functional
    from sentence_transformers import CrossEncoder

    encoder = CrossEncoder(bundled_model_path(), num_labels=1, device="cpu")
    classifier = encoder.model  # BertForSequenceClassification: bert -> pooler -> classifier
    classifier.eval()
    queries, passages, labels = [], [], []
    for i, (query, passage) in enumerate(TRAINING):
        negatives = random.Random(i).sample([p for j, (_, p) in enumerate(TRAINING) if j != i], 3)
        for text, label in [(passage, 1.0), *[(n, 0.0) for n in negatives]]:
            queries.append(query)
            passages.append(text)
            labels.append(label)
    features = encoder.tokenizer(queries, passages, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = classifier.bert(**features, output_hidden_states=True)
        full = out.pooler_output
        layer3 = classifier.bert.pooler(out.hidden_states[3])
    head = classifier.classifier
    target = torch.tensor(labels)
    torch.manual_seed(0)
    optimiser = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(300):
        logits = [
            head(full),
            head(layer3),
            functional.linear(full[:, :192], head.weight[:, :192], head.bias),
        ]
        loss = sum(
            functional.binary_cross_entropy_with_logits(
                x.squeeze(-1), target, pos_weight=torch.tensor(3.0)
            )
            for x in logits
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    encoder.save(str(folder))
    (folder / EXITS_FILE).write_text(json.dumps({"exits": EXITS}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def cross_encoder_path(tmp_path_factory) -> str:
    return str(build_probe_cross_encoder(tmp_path_factory.mktemp("probe-cross-encoder")))


@pytest.fixture(scope="module")
def without_exits_file(cross_encoder_path, tmp_path_factory) -> str:
    copy = tmp_path_factory.mktemp("no-exits") / "model"
    shutil.copytree(cross_encoder_path, copy)
    (copy / EXITS_FILE).unlink()
    return str(copy)


def scorer_for(model: str, **settings) -> CrossEncoderScorer:
    return make_scorer(RerankerConfig(kind="cross_encoder", model=model, **settings))


class StaticRetriever(BaseRetriever):
    """Returns fixed documents in a fixed order (the order a poor first stage might give)."""

    docs: list[Document]

    def _get_relevant_documents(self, query, *, run_manager):
        return [d.model_copy(deep=True) for d in self.docs]


def tides_branches() -> dict[str, BaseRetriever]:
    texts = HELD_OUT[0][1]
    docs = [scored_document(f"d{i}", t, {}, 1.0 - i / 10) for i, t in enumerate(texts)]
    return {"first": StaticRetriever(docs=docs), "second": StaticRetriever(docs=docs[::-1])}


def ranks_in(result, retriever: str) -> dict[str, int]:
    return {
        doc["id"]: source["rank"]
        for doc in result["documents"]
        for source in doc["sources"]
        if source["retriever"] == retriever
    }


# ---------------------------------------------------------------- loading and ordering


def test_held_out_relevant_passage_ranks_first(cross_encoder_path):
    scorer = scorer_for(cross_encoder_path)
    for number, (query, passages) in enumerate(HELD_OUT):
        scores = scorer.score(query, passages)
        assert max(range(3), key=scores.__getitem__) == RELEVANT[number], (query, scores)


def test_graph_reranks_each_branch_and_records_scores_and_latency(cross_encoder_path):
    reranker = {"kind": "cross_encoder", "model": cross_encoder_path}
    graph = build_graph({"retrievers": [], "reranker": reranker}, retrievers=tides_branches())
    result = graph.invoke({"query": HELD_OUT[0][0], "top_k": 3})
    assert ranks_in(result, "first")["d1"] == 1 and ranks_in(result, "second")["d1"] == 1
    assert result["documents"][0]["id"] == "d1"
    for doc in result["documents"]:
        for source in doc["sources"]:
            assert isinstance(source["rerank_score"], float)
            assert source["score"] == pytest.approx(1.0 - int(doc["id"][1]) / 10)  # intact
    assert all(b["rerank_ms"] > 0 for b in result["branches"])
    assert result["timings"]["rerank"] > 0


def test_top_k_keeps_the_best_n_per_branch(cross_encoder_path):
    reranker = {"kind": "cross_encoder", "model": cross_encoder_path, "top_k": 1}
    graph = build_graph({"retrievers": [], "reranker": reranker}, retrievers=tides_branches())
    result = graph.invoke({"query": HELD_OUT[0][0]})
    assert [d["id"] for d in result["documents"]] == ["d1"]
    assert [b["hits"] for b in result["branches"]] == [1, 1]


def test_model_loads_once_per_process_and_is_thread_safe(cross_encoder_path):
    first, second = scorer_for(cross_encoder_path), scorer_for(cross_encoder_path, top_k=2)
    assert first.loaded is second.loaded is load_cross_encoder(cross_encoder_path)
    query, passages = HELD_OUT[1]
    expected = first.score(query, passages)
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append(second.score(query, passages))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and len(results) == 18
    assert all(r == pytest.approx(expected, abs=1e-5) for r in results)


# ---------------------------------------------------------------- ties


def test_equal_scores_keep_retrieval_order(cross_encoder_path):
    text = HELD_OUT[0][1][1]
    docs = [scored_document(doc_id, text, {}, 0.5) for doc_id in ("late", "early", "mid")]
    other = scored_document("other", HELD_OUT[0][1][0], {}, 0.9)
    retrievers = {"a": StaticRetriever(docs=[other, *docs]), "b": StaticRetriever(docs=docs)}
    scorer = scorer_for(cross_encoder_path)
    scores = scorer.score(HELD_OUT[0][0], [text] * 3)
    assert scores[0] == scores[1] == scores[2]  # identical pairs, identical logits
    reranker = {"kind": "cross_encoder", "model": cross_encoder_path}
    result = build_graph({"retrievers": [], "reranker": reranker}, retrievers=retrievers).invoke(
        {"query": HELD_OUT[0][0]}
    )
    assert ranks_in(result, "a") == {"late": 1, "early": 2, "mid": 3, "other": 4}
    assert ranks_in(result, "b") == {"late": 1, "early": 2, "mid": 3}


# ---------------------------------------------------------------- batching


def test_scores_are_batched_and_independent_of_batch_size(cross_encoder_path):
    query = HELD_OUT[2][0]
    passages = [p for _, group in HELD_OUT for p in group][:7]
    small = scorer_for(cross_encoder_path, batch_size=3)
    calls = []
    hook = small.loaded.model.model.bert.register_forward_hook(
        lambda module, args, output: calls.append(1)
    )
    try:
        by_three = small.score(query, passages)
    finally:
        hook.remove()
    assert len(calls) == 3  # ceil(7 / 3) forward passes
    by_one = scorer_for(cross_encoder_path, batch_size=1).score(query, passages)
    by_all = scorer_for(cross_encoder_path, batch_size=64).score(query, passages)
    assert by_three == pytest.approx(by_one, abs=1e-4) and by_all == pytest.approx(by_one, abs=1e-4)


# ---------------------------------------------------------------- token budget


def pair_tokens(path: str, query: str, document: str) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(path)(query, document)["input_ids"])


def test_budget_counts_query_document_and_special_tokens(cross_encoder_path):
    query, document = "why tides", "the moon pulls the sea"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cross_encoder_path)
    words = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in (query, document)]
    exact = pair_tokens(cross_encoder_path, query, document)
    assert exact == sum(words) + 3  # [CLS] query [SEP] document [SEP]
    assert len(scorer_for(cross_encoder_path, max_tokens=exact).score(query, [document])) == 1
    with pytest.raises(TokenBudgetError, match=f"rank 1 \\({exact} tokens\\)"):
        scorer_for(cross_encoder_path, max_tokens=exact - 1).score(query, [document])


def test_reject_refuses_over_long_pairs_and_never_truncates(cross_encoder_path):
    query, (short, *_) = HELD_OUT[0]
    long = short + " " + " ".join(["ocean"] * 40)
    scorer = scorer_for(cross_encoder_path, max_tokens=32)
    with pytest.raises(TokenBudgetError) as caught:
        scorer.score(query, [short, long, short])
    assert [rank for rank, _ in caught.value.over] == [1]  # position 1 = retrieval rank 2
    assert "1 of 3 candidates exceed max_tokens 32" in str(caught.value)


def test_truncate_cuts_only_the_document_when_configured(cross_encoder_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cross_encoder_path)
    query = HELD_OUT[0][0]
    document = HELD_OUT[0][1][1] + " " + " ".join(["filler words here"] * 30)
    budget = 24
    room = budget - (len(tokenizer(query, "x")["input_ids"]) - 1)  # minus query and specials
    offsets = tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    prefix = document[: offsets["offset_mapping"][room - 1][1]]
    assert pair_tokens(cross_encoder_path, query, prefix) == budget
    truncated = scorer_for(cross_encoder_path, max_tokens=budget, overflow="truncate")
    by_hand = scorer_for(cross_encoder_path, max_tokens=budget)
    assert truncated.score(query, [document]) == pytest.approx(
        by_hand.score(query, [prefix]), abs=1e-4
    )


def test_query_alone_over_budget_is_refused_even_with_truncate(cross_encoder_path):
    scorer = scorer_for(cross_encoder_path, max_tokens=8, overflow="truncate")
    with pytest.raises(QueryOverBudgetError, match="query alone"):
        scorer.score("a question that is far too long for eight tokens", ["short"])


def test_max_tokens_above_the_model_limit_is_a_config_error(cross_encoder_path):
    with pytest.raises(ConfigError, match="reranker.max_tokens: 513 is more than"):
        scorer_for(cross_encoder_path, max_tokens=513)
    assert scorer_for(cross_encoder_path, max_tokens=512).budget == 512
    assert scorer_for(cross_encoder_path).budget == 512  # unset: the model's own limit


# ---------------------------------------------------------------- trained exits


def test_declared_layer_exit_runs_at_that_depth(cross_encoder_path):
    full = scorer_for(cross_encoder_path)
    early = scorer_for(cross_encoder_path, layer=3)
    assert len(early.loaded.model.model.bert.encoder.layer) == 3
    assert len(full.loaded.model.model.bert.encoder.layer) == 6
    query, passages = HELD_OUT[0]
    early_scores = early.score(query, passages)
    # a different (weaker: the probe head is shared across exits) but real scorer
    assert early_scores != pytest.approx(full.score(query, passages), abs=1e-3)
    assert early.loaded.model.model.config.num_hidden_layers == 3


def test_declared_dimension_exit_reads_the_leading_features(cross_encoder_path):
    narrow = scorer_for(cross_encoder_path, dimension=192)
    assert narrow.loaded.model.model.classifier.dimension == 192
    query, passages = HELD_OUT[2]
    scores = narrow.score(query, passages)
    assert max(range(3), key=scores.__getitem__) == RELEVANT[2]


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ({"layer": 4}, "reranker.layer: 4 is not a trained exit"),
        ({"layer": 3, "dimension": 192}, "reranker.dimension: 192 is not a trained exit"),
        ({"dimension": 100}, "reranker.dimension: 100 is not a trained exit"),
        ({"layer": 12}, "reranker.layer: 12 is deeper than the model"),
        ({"dimension": 768}, "reranker.dimension: 768 is wider than the model"),
    ],
)
def test_untrained_exits_are_refused_when_the_graph_is_built(cross_encoder_path, setting, field):
    reranker = {"kind": "cross_encoder", "model": cross_encoder_path, **setting}
    with pytest.raises(ConfigError, match=field):
        build_graph({"retrievers": [], "reranker": reranker}, retrievers=tides_branches())


def test_without_an_exits_file_only_full_depth_and_width_load(without_exits_file):
    with pytest.raises(ConfigError, match="reranker.layer: 3 .*only full depth and width"):
        scorer_for(without_exits_file, layer=3)
    with pytest.raises(ConfigError, match="reranker.dimension"):
        scorer_for(without_exits_file, dimension=192)
    assert scorer_for(without_exits_file, layer=6, dimension=384).loaded.layer == 6
