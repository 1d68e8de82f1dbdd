"""``qdrant_edge``: Qdrant's engine in-process, on disk. Ingest through the CLI's code path,
ids/content/scores, tenants as filters, persistence across processes, readers during a write,
exact results on small data, and a writer killed mid-write leaving the store as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from backend_servers import BRIDGE_QUESTION, TENANT_DOCS
from parallel_rag.backends.qdrant_edge.retriever import (
    QdrantEdgeRetriever,
    QdrantEdgeSettings,
    current_revision,
)
from parallel_rag.backends.qdrant_edge.search import OpenRevision, open_revision, search_params
from parallel_rag.backends.qdrant_edge.writes import (
    SENTENCES_DIR,
    stored_datatype,
    stored_fingerprints,
    write_chunks,
)
from parallel_rag.backends.shared.mapped_files import mapped_ranges
from parallel_rag.backends.shared.revisions import CURRENT_FILE
from parallel_rag.graph import build_graph
from parallel_rag.graph.components import build_retriever
from parallel_rag.graph.configuration import ENTRY_MODELS, EmbeddingsConfig
from parallel_rag.graph.loading import parse_config
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
from parallel_rag.studio.ingestion import ingest_paths
from parallel_rag.studio.ingestion.load import file_id_for
from qdrant_edge import (
    EdgeShard,
    PayloadSchemaType,
    QuantizationSearchParams,
    Query,
    QueryRequest,
    SearchParams,
    UpdateOperation,
)

EdgeEntry = ENTRY_MODELS["qdrant_edge"]

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ingested(tenant_corpus_file, tmp_path_factory):
    base_dir = tmp_path_factory.mktemp("edge")
    entry = {"name": "dense", "backend": "qdrant_edge", "backend_config": {"path": "edge"}}
    config = parse_config(
        {
            "retrievers": [{"name": "lexical", "backend": "bm25"}, entry],
            "generator": {"min_similarity": None},
        }
    )
    report = ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    assert "dense (qdrant_edge)" in report.indexes
    return entry, base_dir, config


def retriever(entry: dict, base_dir: Path, **extra):
    return build_retriever(
        EdgeEntry.model_validate({**entry, **extra}), base_dir, EmbeddingsConfig()
    )


def test_search_returns_ids_content_metadata_and_scores(ingested):
    entry, base_dir, _ = ingested
    docs = retriever(entry, base_dir).invoke(BRIDGE_QUESTION, k=2)
    assert len(docs) == 2 and "Golden Gate" in docs[0].page_content
    assert docs[0].metadata["record_id"].endswith("bridge")
    assert 0 < docs[0].metadata["retrieval_score"] <= 1.0001
    again = retriever(entry, base_dir).invoke(BRIDGE_QUESTION, k=2)
    assert [d.id for d in again] == [d.id for d in docs]  # stable ids


def test_tenant_filter_never_returns_another_tenant(ingested):
    entry, base_dir, _ = ingested
    dense = retriever(entry, base_dir)
    assert {d.metadata["tenant"] for d in dense.invoke(BRIDGE_QUESTION, k=6)} == {
        "acme",
        "globex",
    }
    for tenant in ("acme", "globex"):
        docs = dense.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": tenant})
        assert len(docs) == 3 and {d.metadata["tenant"] for d in docs} == {tenant}
    assert dense.invoke(BRIDGE_QUESTION, k=6, filters={"tenant": "nobody"}) == []


def test_threshold_is_the_score_threshold(ingested):
    entry, base_dir, _ = ingested
    docs = retriever(entry, base_dir, similarity_threshold=0.5).invoke(BRIDGE_QUESTION, k=6)
    assert docs and len(docs) < 6
    assert all(d.metadata["retrieval_score"] >= 0.5 for d in docs)


def test_edge_branch_in_the_graph_with_a_tenant(ingested):
    _, base_dir, config = ingested
    result = build_graph(config, base_dir=base_dir).invoke(
        {"query": BRIDGE_QUESTION, "tenant": "acme", "top_k": 3}
    )
    assert {b["status"] for b in result["branches"]} == {"ok"}
    assert {d["metadata"]["tenant"] for d in result["documents"]} == {"acme"}


def test_the_store_persists_and_another_process_reads_it(ingested):
    entry, base_dir, _ = ingested
    here = [d.id for d in retriever(entry, base_dir).invoke(BRIDGE_QUESTION, k=3)]
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from parallel_rag.backends.qdrant_edge.retriever import (\n"
        "    QdrantEdgeRetriever, QdrantEdgeSettings)\n"
        "settings = QdrantEdgeSettings(path='edge')\n"
        "r = QdrantEdgeRetriever(settings=settings, base_dir=Path(sys.argv[1]))\n"
        "print(json.dumps([d.id for d in r.invoke(sys.argv[2], k=3)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(base_dir), BRIDGE_QUESTION],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == here


def test_ingest_asks_what_is_stored_without_holding_the_collection(ingested, tenant_corpus_file):
    # ingest asks each store for its fingerprints before every batch: the dense store opens
    # its passage shard for that and closes it, so nothing of the collection stays mapped
    _, base_dir, _ = ingested
    directory = QdrantEdgeSettings(path="edge").store_dir(base_dir)
    file_id = file_id_for(tenant_corpus_file)
    held = set(mapped_ranges(directory))  # what other tests' readers hold
    found = stored_fingerprints(directory, [file_id])
    assert len(found) == len(TENANT_DOCS)
    assert {held_file for _, held_file, _ in found} == {file_id}
    assert set(mapped_ranges(directory)) == held


def test_reingesting_unchanged_files_leaves_the_store_alone(ingested, tenant_corpus_file):
    _, base_dir, config = ingested
    directory = QdrantEdgeSettings(path="edge").store_dir(base_dir)
    before = current_revision(directory)
    ingest_paths([tenant_corpus_file], config, base_dir, progress=False)
    assert current_revision(directory) == before


# ------------------------------------------------------------------ the store on its own vectors


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write(settings, vectors, *, first=0, file_id="f", replace=(), model="bundled"):
    ids = [f"chunk-{first + i}" for i in range(len(vectors))]
    write_chunks(
        settings,
        None,
        ids=ids,
        texts=[f"text {first + i}" for i in range(len(vectors))],
        metadatas=[
            {"file_id": file_id, "tenant": f"t{(first + i) % 3}"} for i in range(len(vectors))
        ],
        vectors=vectors.tolist(),
        replace_file_ids=list(replace),
        embedding_model=model,
        sentences=GeneratorSentences(model),
    )
    return ids


def search(settings, vector, k=10, **kwargs):
    shard = open_revision(settings.store_dir()).shard
    hits = shard.query(
        QueryRequest(limit=k, query=Query.Nearest(vector.tolist()), with_payload=True, **kwargs)
    )
    return [(h.payload["id"], h.score) for h in hits]


# float16 keeps 11 significant bits: a 16-dimension cosine moves by up to a few 1e-4
@pytest.mark.parametrize(("datatype", "tolerance"), [("float16", 1e-3), ("float32", 1e-5)])
def test_identical_results_to_exact_search_on_small_data(tmp_path, datatype, tolerance):
    settings = QdrantEdgeSettings(path=str(tmp_path), vector_datatype=datatype)
    vectors = unit_vectors(500, 16, seed=1)
    ids = write(settings, vectors)
    assert stored_datatype(settings.store_dir() / current_revision(settings.store_dir())) == (
        datatype
    )
    position = {chunk: i for i, chunk in enumerate(ids)}
    for query in unit_vectors(20, 16, seed=2):
        scores = vectors @ query
        exact = [ids[i] for i in np.argsort(-scores, kind="stable")[:10]]
        found = search(settings, query)
        if datatype == "float32":
            assert [chunk for chunk, _ in found] == exact
        # each hit scored by its own vector; at float16 two hits closer than the rounding
        # may swap, so the scores, not the ids, are the top 10
        own = scores[[position[chunk] for chunk, _ in found]]
        assert np.allclose([s for _, s in found], own, atol=tolerance)
        assert np.allclose([s for _, s in found], np.sort(scores)[::-1][:10], atol=tolerance)


def test_a_collection_keeps_the_vector_type_it_was_created_with(tmp_path):
    """A float32 collection written again under the float16 default stays float32 (the
    engine refuses to open a shard under another type), sentence shard included."""
    old = QdrantEdgeSettings(path=str(tmp_path), vector_datatype="float32")
    vectors = unit_vectors(60, 16, seed=3)
    write(old, vectors[:30])
    new = QdrantEdgeSettings(path=str(tmp_path))
    assert new.vector_datatype == "float16"
    ids = write(new, vectors[30:], first=30, file_id="g")
    folder = new.store_dir() / current_revision(new.store_dir())
    assert stored_datatype(folder) == "float32"
    assert stored_datatype(folder / SENTENCES_DIR) in (None, "float32")
    found = search(new, vectors[45])
    assert found[0][0] == ids[15]
    assert abs(found[0][1] - 1.0) < 1e-5


def clustered_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit vectors around 200 centres (fixed by ``seed``; ``n`` only draws the points): text
    embeddings have such structure, and on structureless random vectors of this dimension
    no approximate index reaches exact search's top ten."""
    centres = unit_vectors(200, dim, seed)
    rng = np.random.default_rng([seed, n])
    points = centres[rng.integers(0, len(centres), n)] + 0.05 * rng.normal(size=(n, dim))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def segment_quantization(settings) -> list:
    """The 8-bit copy settings of each indexed segment of the live revision."""
    folder = settings.store_dir() / current_revision(settings.store_dir())
    configs = [json.loads(p.read_text())["config"] for p in folder.glob("segments/*/segment.json")]
    return [
        c["vector_data"][""].get("quantization_config")
        for c in configs
        if c["vector_data"][""]["index"]["type"] == "hnsw"
    ]


def test_an_indexed_segment_is_searched_on_8bit_copies_and_scored_by_its_vectors(tmp_path):
    # 12,000 x 384 floats is past the size the engine indexes: the searches walk the HNSW
    # graph over the 8-bit copies held in memory, and the hits come back rescored
    vectors, queries = clustered_vectors(12_000, 384, seed=3), clustered_vectors(20, 384, seed=3)
    settings = QdrantEdgeSettings(path=str(tmp_path / "int8"), passages=None)
    assert (settings.quantization, settings.oversampling) == ("int8", 2.0)
    ids = write(settings, vectors)
    assert segment_quantization(settings) == [
        {"scalar": {"type": "int8", "quantile": 0.99, "memory": "cold"}}
    ]
    unscaled = QdrantEdgeSettings(path=str(tmp_path / "float"), passages=None, quantization=None)
    write(unscaled, vectors)
    assert segment_quantization(unscaled) == [None]
    position = {chunk: i for i, chunk in enumerate(ids)}
    overlap, rounded = [], 0
    for query in queries:
        found = search(settings, query, params=search_params(settings, 10))
        own = vectors[[position[chunk] for chunk, _ in found]] @ query
        # rescored by the stored vectors (float16: within 1e-4 of the float32 cosine), not
        # by the 8-bit copies, which are off by more (``rounded`` below)
        assert np.allclose([score for _, score in found], own, atol=1e-4)
        # a collection built without copies (or before they existed) is searched as it is
        assert search(unscaled, query, params=search_params(settings, 10)) == search(
            unscaled, query, params=SearchParams(hnsw_ef=256)
        )
        exact = {ids[i] for i in np.argsort(-(vectors @ query))[:10]}
        overlap.append(len(exact & {chunk for chunk, _ in found}) / 10)
        copies = search(
            settings,
            query,
            params=SearchParams(hnsw_ef=256, quantization=QuantizationSearchParams(rescore=False)),
        )
        rounded += not np.allclose(
            [s for _, s in copies], vectors[[position[c] for c, _ in copies]] @ query, atol=1e-4
        )
    assert np.mean(overlap) >= 0.95
    assert rounded  # what the copies alone score differs: the scores above were rescored


def resident_share(ranges: set[tuple[int, int]]) -> float:
    """The share of the pages of these mappings of this process that is resident."""
    size = resident = 0
    current = False
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                current = (start, end) in ranges
                size += (end - start) if current else 0
            elif current and head == "Rss:":
                resident += int(line.split()[1]) * 1024
    return resident / size if size else 0.0


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc (Linux)")
def test_segments_are_stored_cold_and_a_reader_reads_its_revision_in(tmp_path):
    # a write must not read the whole collection in (ingest's memory would grow with the
    # corpus), so segments are stored cold; a reader wants every page in before its first
    # query, so opening a revision populates its own mappings of it
    settings = QdrantEdgeSettings(path=str(tmp_path), passages=None)
    write(settings, clustered_vectors(12_000, 384, seed=4))
    directory = settings.store_dir()
    folder = directory / current_revision(directory)
    for segment in folder.glob("segments/*/segment.json"):
        config = json.loads(segment.read_text())["config"]
        assert config["payload_storage_type"]["type"] == "mmap", segment
        assert "InRam" not in config["vector_data"][""]["storage_type"], segment

    writer_view = EdgeShard.load(str(folder))  # what a write opens: pages not read in
    try:
        assert resident_share(set(mapped_ranges(folder))) < 0.5
    finally:
        writer_view.close()
    reader = OpenRevision(directory, folder.name)
    assert reader.shard.info().points_count == 12_000
    assert resident_share(set(mapped_ranges(folder))) > 0.95


def test_replacing_a_file_keeps_the_others_and_ids_are_stable(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path))
    vectors = unit_vectors(40, 8, seed=3)
    write(settings, vectors[:20], file_id="a")
    write(settings, vectors[20:], first=20, file_id="b")
    write(settings, vectors[:5], file_id="a", replace=["a"])
    held = open_revision(settings.store_dir())
    assert held.shard.info().points_count == 25
    assert search(settings, vectors[25], k=1)[0][0] == "chunk-25"
    assert search(settings, vectors[3], k=1)[0][0] == "chunk-3"
    revisions = [p for p in settings.store_dir().iterdir() if p.name.startswith("rev-")]
    assert len(revisions) <= 2  # the live one and the previous, for readers still on it


def keyword_indexes(folder: Path) -> dict[str, bool]:
    """Each payload index of the shard in ``folder``: kept on disk (True) or in memory."""
    shard = EdgeShard.load(str(folder))
    try:
        schema = shard.info().payload_schema
        return {field: bool(info.params and info.params.on_disk) for field, info in schema.items()}
    finally:
        shard.close()


def test_id_and_file_indexes_are_kept_on_disk_and_an_older_store_is_converted(tmp_path):
    """A write finds the points it deletes (by chunk id, by file) through keyword indexes kept
    in mapped files, not in the engine's memory, in both shards; a collection written when
    they were kept in memory gets them rebuilt on disk at its next write, and deleting by
    file goes on working through them."""
    settings = QdrantEdgeSettings(path=str(tmp_path))
    vectors = unit_vectors(40, 8, seed=4)
    write(settings, vectors[:20], file_id="a")
    folder = settings.store_dir() / current_revision(settings.store_dir())
    wanted = {"id": True, "metadata.file_id": True}
    assert keyword_indexes(folder) == keyword_indexes(folder / SENTENCES_DIR) == wanted
    for shard_folder in (folder, folder / SENTENCES_DIR):  # as an older release left them
        shard = EdgeShard.load(str(shard_folder))
        for field in wanted:
            shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Keyword))
        shard.flush()
        shard.close()
        assert keyword_indexes(shard_folder) == {"id": False, "metadata.file_id": False}
    write(settings, vectors[20:], first=20, file_id="b")
    write(settings, vectors[:5], file_id="a", replace=["a"])
    folder = settings.store_dir() / current_revision(settings.store_dir())
    assert keyword_indexes(folder) == keyword_indexes(folder / SENTENCES_DIR) == wanted
    held = open_revision(settings.store_dir())
    assert held.shard.info().points_count == 25  # file a's 20 chunks replaced by 5
    assert search(settings, vectors[10], k=1)[0][0] != "chunk-10"  # deleted with file a
    assert search(settings, vectors[25], k=1)[0][0] == "chunk-25"


def segment_files(settings) -> dict[str, dict[str, tuple[int, int]]]:
    """Each segment of the live revision's passage shard: the size and mtime of each file of
    its vectors and its HNSW graph (a flush touches the small bookkeeping files of every
    segment, deleted-point flags included)."""
    folder = settings.store_dir() / current_revision(settings.store_dir())
    return {
        segment.name: {
            str(f.relative_to(segment)): (f.stat().st_size, f.stat().st_mtime_ns)
            for part in ("vector_storage", "vector_index")
            for f in (segment / part).rglob("*")
            if f.is_file() and f.name != "deleted.dat"
        }
        for segment in (folder / "segments").iterdir()
    }


def test_a_write_leaves_full_segments_alone_and_every_point_findable(tmp_path):
    # without a cap each write merged its points into the collection's one segment, reading
    # and rewriting all of it (a write's memory and CPU grew with the collection); capped, a
    # segment that is full is copied into the next revision as it is and never rewritten
    settings = QdrantEdgeSettings(
        path=str(tmp_path), passages=None, segment_mb=16, vector_datatype="float32"
    )
    vectors = clustered_vectors(24_000, 384, seed=5)  # 36 MB of vectors: two segments and more
    ids = []
    for n, first in enumerate(range(0, 24_000, 6_000)):
        ids += write(settings, vectors[first : first + 6_000], first=first, file_id=f"f{n}")
        if n == 2:
            before = segment_files(settings)
    after = segment_files(settings)
    full = [name for name, files in before.items() if name in after and after[name] == files]
    assert full, (before.keys(), after.keys())  # untouched by the fourth write
    assert len(after) >= 3
    held = open_revision(settings.store_dir())
    assert held.shard.info().points_count == 24_000
    for i in range(0, 24_000, 1_000):  # a point of each write, found by its own vector
        assert search(settings, vectors[i], k=1)[0][0] == ids[i]


def test_a_store_refuses_another_embedding_model(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path))
    write(settings, unit_vectors(4, 8, seed=4))
    with pytest.raises(ValueError, match="refusing"):
        write(settings, unit_vectors(4, 8, seed=5), first=4, model="other/model")
    other = QdrantEdgeRetriever(settings=settings, embedding_model="other/model")
    with pytest.raises(ValueError, match="built with"):
        other.invoke("q")


def test_a_missing_store_is_a_clear_error(tmp_path):
    missing = QdrantEdgeRetriever(settings=QdrantEdgeSettings(path=str(tmp_path)))
    with pytest.raises(LookupError, match="parallel-rag ingest"):
        missing.invoke("q")


def test_readers_keep_answering_during_a_write(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path))
    vectors = unit_vectors(3000, 32, seed=6)
    write(settings, vectors[:1000], file_id="a")
    probe = vectors[10]
    failures: list[BaseException] = []
    answers: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                answers.append(search(settings, probe, k=1)[0][0])
            except BaseException as error:  # noqa: BLE001 - collected for the assertion
                failures.append(error)
                return

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        write(settings, vectors[1000:], first=1000, file_id="b")
        write(settings, vectors[:1000], file_id="a", replace=["a"])
    finally:
        stop.set()
        for reader in readers:
            reader.join(timeout=60)
    assert not failures
    assert answers and set(answers) == {"chunk-10"}
    assert open_revision(settings.store_dir()).shard.info().points_count == 3000


KILLED_WRITER = """
import sys
import numpy as np
from parallel_rag.backends.qdrant_edge.retriever import QdrantEdgeSettings, write_chunks
from parallel_rag.nodes.generate.sentence_vectors import GeneratorSentences
settings = QdrantEdgeSettings(path=sys.argv[1])
vectors = np.random.default_rng(7).normal(size=(200_000, 32)).astype(np.float32)
print("writing", flush=True)
write_chunks(settings, None, ids=[f"big-{i}" for i in range(len(vectors))],
             texts=["x"] * len(vectors), metadatas=[{"file_id": "big"}] * len(vectors),
             vectors=vectors.tolist(), replace_file_ids=["a"],
             sentences=GeneratorSentences("bundled"))
"""


def test_a_writer_killed_mid_write_leaves_the_store_as_it_was(tmp_path):
    settings = QdrantEdgeSettings(path=str(tmp_path))
    vectors = unit_vectors(200, 16, seed=8)
    write(settings, vectors, file_id="a")
    directory = settings.store_dir()
    live = (directory / CURRENT_FILE).read_text()
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 120
        while not list(directory.glob(".rev-*.tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # well into copying or upserting
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=60)
    assert (directory / CURRENT_FILE).read_text() == live
    assert search(settings, vectors[7], k=1)[0][0] == "chunk-7"
    write(settings, vectors[:3], first=1000, file_id="c")  # the next write converges
    assert not list(directory.glob(".rev-*.tmp-*"))
    assert open_revision(directory).shard.info().points_count == 203
