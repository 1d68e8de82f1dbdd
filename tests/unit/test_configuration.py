"""Configuration: load-time errors name the bad field; 2 to 4 retrievers, failure policies."""

from __future__ import annotations

import textwrap

import pytest
from parallel_rag.graph import build_graph
from parallel_rag.graph.configuration import ENTRY_MODELS, ConfigError, PipelineConfig
from parallel_rag.graph.loading import load_config, parse_config

QdrantEntry = ENTRY_MODELS["qdrant"]

BM25 = {"name": "lexical", "backend": "bm25"}
QDRANT = {"name": "dense", "backend": "qdrant"}

SEED_PLUGIN_BLOCK = """\
enabled: true
backend: qdrant
top_k: 5
similarity_threshold: 0.78
injection_mode: tool_role
on_failure: warn
backend_config:
  collection: docs
  reuse_cache_connection: true
  content_field: content
"""


def config_error(data, **kwargs) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, **kwargs)
    return str(caught.value)


def entries(n: int) -> list[dict]:
    return [{"name": f"r{i}", "backend": "bm25"} for i in range(n)]


# ---------------------------------------------------------------- valid configurations


@pytest.mark.parametrize("n", [2, 3, 4])
def test_two_to_four_retrievers_accepted(n):
    config = parse_config({"retrievers": entries(n)})
    assert [e.name for e in config.retrievers] == [f"r{i}" for i in range(n)]


def test_defaults():
    config = parse_config({"retrievers": [BM25, QDRANT]})
    assert config.on_failure == "warn"  # ours says so; the plugin's default is skip
    assert config.fusion.k == 60
    assert config.fusion.weights == {}
    assert config.generator.kind == "extractive"
    assert config.rewriter is None and config.reranker is None
    assert config.tenant_field == "tenant"
    lexical, dense = config.retrievers
    assert lexical.top_k is None and lexical.similarity_threshold is None  # unset: no threshold
    assert lexical.on_failure is None  # falls back to the pipeline's policy
    assert not lexical.is_dense and dense.is_dense


def test_name_defaults_to_backend():
    config = parse_config({"retrievers": [{"backend": "bm25"}, {"backend": "qdrant"}]})
    assert [e.name for e in config.retrievers] == ["bm25", "qdrant"]


def test_seed_plugin_block_pastes_in_unchanged(tmp_path):
    import yaml

    block = yaml.safe_load(SEED_PLUGIN_BLOCK)
    config = parse_config({"retrievers": [BM25, block]})
    entry = config.retrievers[1]
    assert isinstance(entry, QdrantEntry)
    assert entry.name == "qdrant"
    assert entry.top_k == 5
    assert entry.similarity_threshold == 0.78
    assert entry.on_failure == "warn"
    assert entry.injection_mode == "tool_role"
    assert entry.enabled is True
    assert entry.backend_config.collection == "docs"
    assert entry.backend_config.content_field == "content"
    assert entry.backend_config.reuse_cache_connection is True

    # and the same block pasted, indented, into a YAML file
    path = tmp_path / "parallel-rag.yaml"
    path.write_text(
        "retrievers:\n  - {name: lexical, backend: bm25}\n  -\n"
        + textwrap.indent(SEED_PLUGIN_BLOCK, "    "),
        encoding="utf-8",
    )
    loaded, base_dir = load_config(path)
    assert loaded.retrievers[1].model_dump() == entry.model_dump()
    assert base_dir == tmp_path.resolve()


def test_disabled_entries_do_not_count():
    config = parse_config({"retrievers": [*entries(2), {**QDRANT, "enabled": False}]})
    assert [e.name for e in config.retrievers] == ["r0", "r1"]
    message = config_error({"retrievers": [BM25, {**QDRANT, "enabled": False}]})
    assert "retrievers" in message and "got 1" in message


# ---------------------------------------------------------------- errors name the field


@pytest.mark.parametrize("n", [0, 1, 5])
def test_retriever_count_outside_two_to_four_refused(n):
    message = config_error({"retrievers": entries(n)})
    assert "retrievers" in message
    assert "2 to 4" in message
    assert f"got {n}" in message


def test_duplicate_names_refused():
    message = config_error({"retrievers": [BM25, {"name": "lexical", "backend": "qdrant"}]})
    assert "retrievers" in message and "duplicate" in message and "lexical" in message


def test_hyde_without_dense_retriever_refused():
    message = config_error({"retrievers": entries(2), "rewriter": {"kind": "hyde"}})
    assert "rewriter.kind" in message and "dense" in message
    # with a dense retriever it loads
    parse_config({"retrievers": [BM25, QDRANT], "rewriter": {"kind": "hyde"}})


def test_unknown_backend_refused():
    message = config_error({"retrievers": [BM25, {"name": "x", "backend": "elastic"}]})
    assert "retrievers.1" in message and "'elastic'" in message and "backend" in message


def test_missing_backend_refused():
    message = config_error({"retrievers": [BM25, {"name": "x"}]})
    assert "retrievers.1" in message and "backend" in message


@pytest.mark.parametrize("threshold", [-0.1, 1.5])
def test_threshold_outside_unit_interval_refused(threshold):
    message = config_error(
        {"retrievers": [BM25, {**QDRANT, "similarity_threshold": threshold}]},
    )
    assert "retrievers.1" in message and "similarity_threshold" in message


def test_threshold_on_bm25_refused():
    message = config_error(
        {"retrievers": [{**BM25, "similarity_threshold": 0.2}, QDRANT]},
    )
    assert "retrievers.0" in message and "similarity_threshold" in message
    assert "bm25" in message


@pytest.mark.parametrize("top_k", [0, -3])
def test_retriever_top_k_must_be_positive(top_k):
    message = config_error({"retrievers": [{**BM25, "top_k": top_k}, QDRANT]})
    assert "retrievers.0" in message and "top_k" in message


@pytest.mark.parametrize("k", [0, -1])
def test_fusion_k_must_be_positive(k):
    message = config_error({"retrievers": [BM25, QDRANT], "fusion": {"method": "rrf", "k": k}})
    assert "fusion.k" in message


def test_unknown_fusion_weight_name_refused():
    message = config_error(
        {"retrievers": [BM25, QDRANT], "fusion": {"weights": {"lexical": 1, "dnese": 2}}}
    )
    assert "fusion.weights" in message and "dnese" in message


def test_negative_fusion_weight_refused():
    message = config_error({"retrievers": [BM25, QDRANT], "fusion": {"weights": {"dense": -1}}})
    assert "fusion.weights.dense" in message


def test_fusion_weights_may_name_code_supplied_retrievers():
    config = parse_config(
        {"retrievers": [BM25], "fusion": {"weights": {"mine": 2.0}}}, extra_retrievers=["mine"]
    )
    assert config.fusion.weights == {"mine": 2.0}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"retreivers": []}, "retreivers"),
        ({"fusion": {"method": "rrf", "k": 10, "kk": 1}}, "fusion.kk"),
        ({"generator": {"kind": "extractive", "max_sentense": 2}}, "generator.max_sentense"),
        ({"retrievers_extra": 1}, "retrievers_extra"),
    ],
)
def test_unknown_keys_refused_with_their_path(data, field):
    message = config_error({"retrievers": [BM25, QDRANT], **data})
    assert field in message and "Extra inputs are not permitted" in message


def test_unknown_key_inside_a_retriever_entry_refused():
    message = config_error({"retrievers": [{**BM25, "topk": 3}, QDRANT]})
    assert "retrievers.0" in message and "topk" in message


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"retrievers": "bm25"}, "retrievers"),
        ({"retrievers": [{**BM25, "top_k": "many"}, QDRANT]}, "top_k"),
        ({"retrievers": [BM25, QDRANT], "fusion": {"method": "rrf", "k": "sixty"}}, "fusion.k"),
        ({"retrievers": [BM25, QDRANT], "on_failure": "ignore"}, "on_failure"),
        ({"retrievers": [BM25, QDRANT], "rewriter": {"kind": "nope"}}, "rewriter.kind"),
        ({"retrievers": [BM25, QDRANT], "reranker": {"top_k": 0}}, "reranker.top_k"),
        ({"retrievers": [BM25, QDRANT], "generator": {"kind": "gpt"}}, "generator.kind"),
        ({"retrievers": [BM25, QDRANT], "tenant_field": ""}, "tenant_field"),
    ],
)
def test_wrong_types_and_values_name_the_field(data, field):
    assert field in config_error(data)


def test_non_mapping_refused():
    assert "mapping" in config_error(["retrievers"])  # type: ignore[arg-type]


def test_every_problem_is_reported_with_its_source():
    message = config_error(
        {"retrievers": [BM25, QDRANT], "fusion": {"method": "rrf", "k": 0}, "typo": 1},
        source="my.yaml",
    )
    assert "my.yaml" in message and "fusion.k" in message and "typo" in message


def test_pipeline_config_round_trips_through_parse_config():
    config = parse_config({"retrievers": [BM25, QDRANT], "fusion": {"method": "rrf", "k": 7}})
    again = parse_config(config)
    assert isinstance(again, PipelineConfig) and again.fusion.k == 7


# ---------------------------------------------------------------- files


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found") as caught:
        load_config(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(caught.value)


def test_invalid_yaml_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("retrievers: [\n  - {name: a, backend: bm25\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        load_config(path)
    assert "broken.yaml" in str(caught.value)


def test_invalid_utf8_config_file_refused(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"retrievers: []\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="latin1.yaml"):
        load_config(path)


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_file_errors_name_the_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "retrievers:\n  - {name: a, backend: bm25}\n  - {name: b, backend: qdrant}\n"
        "fusion: {method: rrf, k: 0}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and "fusion.k" in str(caught.value)


def test_config_path_from_environment(tmp_path, monkeypatch):
    path = tmp_path / "from-env.yaml"
    path.write_text(
        "retrievers: [{backend: bm25}, {backend: qdrant}]\nfusion: {method: rrf, k: 9}\n"
    )
    monkeypatch.setenv("PARALLEL_RAG_CONFIG", str(path))
    loaded, base_dir = load_config()
    assert loaded.fusion.k == 9 and base_dir == tmp_path.resolve()


def test_embedded_defaults_without_any_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loaded, base_dir = load_config()
    assert [(e.name, e.backend) for e in loaded.retrievers] == [
        ("lexical", "bm25"),
        ("dense", "qdrant_edge"),
    ]
    assert base_dir == tmp_path


# ---------------------------------------------------------------- build_graph with objects


def test_build_graph_counts_retriever_objects(fakes):
    one = {"a": fakes.ListRetriever()}
    with pytest.raises(ConfigError, match="retrievers") as caught:
        build_graph({"retrievers": []}, retrievers=one)
    assert "got 1" in str(caught.value)
    five = {f"r{i}": fakes.ListRetriever() for i in range(5)}
    with pytest.raises(ConfigError, match="got 5"):
        build_graph({"retrievers": []}, retrievers=five)
    four = {f"o{i}": fakes.ListRetriever() for i in range(4)}
    with pytest.raises(ConfigError, match="got 5"):  # entries and objects count together
        build_graph({"retrievers": entries(1)}, retrievers=four)


def test_build_graph_refuses_a_name_shared_by_entry_and_object(fakes):
    with pytest.raises(ConfigError, match="duplicate") as caught:
        build_graph({"retrievers": [BM25]}, retrievers={"lexical": fakes.ListRetriever()})
    assert "lexical" in str(caught.value)


def test_build_graph_refuses_a_non_retriever(fakes):
    with pytest.raises(ConfigError, match="retrievers.b"):
        build_graph({}, retrievers={"a": fakes.ListRetriever(), "b": object()})


def test_build_graph_hyde_needs_a_dense_object(fakes):
    lexical = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    model = fakes.StaticChatModel(text="A passage.")
    with pytest.raises(ConfigError, match="rewriter.kind"):
        build_graph({"rewriter": {"kind": "hyde"}}, retrievers=lexical, rewriter_model=model)
    mixed = {"a": fakes.ListRetriever(), "b": fakes.DenseListRetriever()}
    build_graph({"rewriter": {"kind": "hyde"}}, retrievers=mixed, rewriter_model=model)


def test_build_graph_from_a_yaml_file_counts_retriever_objects(tmp_path, fakes):
    # A file that relies on code-supplied retrievers must validate with them counted.
    path = tmp_path / "objects-only.yaml"
    path.write_text("retrievers: []\nfusion: {method: rrf, k: 5}\n", encoding="utf-8")
    retrievers = {
        "a": fakes.ListRetriever(docs=[fakes.doc("d", "Some text here.", 1.0)]),
        "b": fakes.DenseListRetriever(),
    }
    graph = build_graph(path, retrievers=retrievers)
    result = graph.invoke({"query": "some text"})
    assert result["documents"][0]["fused_score"] == pytest.approx(1 / 6)

    hyde = tmp_path / "hyde.yaml"
    hyde.write_text("rewriter: {kind: hyde}\nretrievers: []\n", encoding="utf-8")
    build_graph(hyde, retrievers=retrievers, rewriter_model=fakes.StaticChatModel(text="P."))
    with pytest.raises(ConfigError, match="rewriter.kind"):
        build_graph(
            hyde,
            retrievers={"a": fakes.ListRetriever(), "b": fakes.ListRetriever()},
            rewriter_model=fakes.StaticChatModel(text="P."),
        )


def test_rewriter_without_a_model_is_refused_at_build(fakes):
    retrievers = {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()}
    with pytest.raises(ConfigError, match="rewriter.llm"):
        build_graph({"rewriter": {"kind": "multi_query"}}, retrievers=retrievers)
    with pytest.raises(ConfigError, match="generator.llm"):
        build_graph({"generator": {"kind": "llm"}}, retrievers=retrievers)
