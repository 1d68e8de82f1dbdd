"""``build_graphs``, ``build_graph`` and ``build_retrieval_graph``: the compiled LangGraph
workflows for a configuration.

The retrieval graph: RAGRequest -> [rewrite] -> retrieve x N (Send) -> [fallback] ->
[rerank x N] -> fuse -> RetrievalResult (the fused documents, views, branch records, warnings,
timings). The answer graph is the same pipeline with ``generate`` after ``fuse`` -> RAGResult.
Both are composed from one set of components, built once (``build_graphs`` compiles both and
hands them over together, ``RAGGraphs``, for the surfaces: the documents-only ones run the
retrieval graph). Each is ``StateGraph.compile()``'s own result. Any
LangChain ``BaseRetriever`` can join as a branch (``retrievers={name: obj}``) and any chat model
can fill the rewriter or generator slot, so the graphs compose with an existing app.

Composed rather than nested: the answer graph holds the retrieval nodes themselves, not the
retrieval graph as a subgraph node, so a run's updates, Studio's drawing and the orchestration
cost are those of one graph (bench/ORCHESTRATION-RESULTS.md measures both).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer
from parallel_rag.backends.base import retrieval_kind_of
from parallel_rag.backends.shared.secrets import register_secrets, secrets_in
from parallel_rag.graph.compiled import (
    RAGGraphs,
    Served,
    graph_of,
    graphs_of,
    retrieval_graph_of,
)
from parallel_rag.graph.components import (
    make_generator,
    make_retriever,
    make_rewriter,
    make_scorer,
)
from parallel_rag.graph.configuration import (
    ConfigError,
    PipelineConfig,
    RewriterConfig,
)
from parallel_rag.graph.context import KnobScope, RAGContext, SwitchableRewriter
from parallel_rag.graph.fitted_fusion import configures_fusion, fusion_plan
from parallel_rag.graph.loading import load_config, parse_config
from parallel_rag.graph.routing import QueryPrefetch, make_entry_router, make_view_router
from parallel_rag.graph.state import (
    RAGRequest,
    RAGResult,
    RAGState,
    RetrievalResult,
)
from parallel_rag.graph.steps import GraphStep
from parallel_rag.nodes.chat_models import make_chat_model
from parallel_rag.nodes.contextualize.node import ContextualizeNode
from parallel_rag.nodes.fallback import FallbackNode
from parallel_rag.nodes.fuse import make_fuse_node
from parallel_rag.nodes.generate.node import GenerateNode
from parallel_rag.nodes.rerank.node import PairScorer, make_rerank_node
from parallel_rag.nodes.retrieve import RetrievalBranch, RetrieveNode
from parallel_rag.nodes.rewrite.node import RewriteNode

__all__ = [
    "ConfigSource",
    "RAGGraphs",
    "Served",
    "build_graph",
    "build_graphs",
    "build_retrieval_graph",
    "graph_of",
    "graphs_of",
    "retrieval_graph_of",
]

ConfigSource = PipelineConfig | Mapping[str, Any] | str | os.PathLike | None


def _retrieve_node(retrieve: RetrieveNode) -> GraphStep:
    # the node's own coroutine for ainvoke/astream instead of ``invoke`` in a worker thread
    return GraphStep(retrieve.invoke, retrieve.ainvoke, name="retrieve")


def _resolve_config(
    config: ConfigSource, extra: Mapping[str, BaseRetriever]
) -> tuple[PipelineConfig, Path]:
    names = list(extra)
    dense = [n for n, r in extra.items() if retrieval_kind_of(r) == "dense"]
    if isinstance(config, PipelineConfig) and not extra:
        # already validated, by its own class: a route pipeline (studio/router/plugin.py) may be one
        # backend, the single-backend rag plugin block, where the top-level pipeline needs 2..4
        return config, Path.cwd()
    if isinstance(config, PipelineConfig | Mapping):
        data = (
            config.model_dump(exclude_unset=True) if isinstance(config, PipelineConfig) else config
        )
        if "retrievers" not in data and extra:
            data = {**data, "retrievers": []}
        return parse_config(dict(data), extra_retrievers=names, extra_dense=dense), Path.cwd()
    # the code-supplied retrievers count toward the file's validation (2..4, HyDE needs dense)
    return load_config(config, extra_retrievers=names, extra_dense=dense)


@dataclass
class _Parts:
    """What both graphs are built of, made once per configuration: the branches, the rewriter,
    the reranker's scorer, fusion, the generator (only the answer graph adds it)."""

    pipeline: PipelineConfig
    root: Path
    branches: list[RetrievalBranch]
    rewriter_config: RewriterConfig | None
    rewriter: SwitchableRewriter | None
    scope: KnobScope
    prefetch: QueryPrefetch
    rerank: Any  # the rerank node, None without a reranker
    loads_reranker: bool  # the scorer loads the embedding model on first use
    conversation_model: BaseChatModel | None  # writes standalone questions; None: carry-over


def _parts(
    config: ConfigSource,
    retrievers: Mapping[str, BaseRetriever] | None,
    rewriter_model: BaseChatModel | None,
    reranker_model: BaseChatModel | None,
    scorer: PairScorer | None,
    base_dir: str | os.PathLike | None,
    conversation_model: BaseChatModel | None = None,
) -> _Parts:
    extra = dict(retrievers or {})
    for branch_name, obj in extra.items():
        if not isinstance(obj, BaseRetriever):
            raise ConfigError(
                f"retrievers.{branch_name}: expected a BaseRetriever, got {type(obj).__name__}"
            )
    pipeline, default_base = _resolve_config(config, extra)
    if scorer is not None and pipeline.reranker is None:
        raise ConfigError("scorer: a pair scorer needs a 'reranker' block in the configuration")
    register_secrets(secrets_in(pipeline))  # redacted from every error, warning and log
    root = Path(base_dir).resolve() if base_dir is not None else default_base

    branches: list[RetrievalBranch] = []
    for entry in pipeline.retrievers:
        retriever = make_retriever(entry, pipeline, root)
        branch = RetrievalBranch(
            name=entry.name,
            index=len(branches),
            retriever=retriever,
            kind=retrieval_kind_of(retriever),
            top_k=entry.top_k,
            on_failure=entry.on_failure or pipeline.on_failure,
            timeout_seconds=entry.timeout_seconds,
        )
        branches.append(branch)
    for branch_name, retriever in extra.items():
        branch = RetrievalBranch(
            name=branch_name,
            index=len(branches),
            retriever=retriever,
            kind=retrieval_kind_of(retriever),
            on_failure=pipeline.on_failure,
        )
        branches.append(branch)

    rewriter_config = pipeline.rewriter or (RewriterConfig() if rewriter_model else None)
    rewriter = None
    if rewriter_config is not None:
        make = partial(make_rewriter, retrievers=[b.retriever for b in branches])
        rewriter = SwitchableRewriter(rewriter_config, rewriter_model, make)
    reranker = pipeline.reranker
    scorer_given = scorer is not None
    rerank = None
    if reranker is not None:
        rerank = make_rerank_node(
            scorer
            if scorer is not None
            else make_scorer(reranker.relative_to(root), reranker_model),
            top_k=reranker.top_k,
            on_failure=reranker.on_failure or pipeline.on_failure,
            max_candidates=reranker.max_candidates,
        )
    return _Parts(
        pipeline=pipeline,
        root=root,
        branches=branches,
        rewriter_config=rewriter_config,
        rewriter=rewriter,
        scope=KnobScope(
            retrievers=tuple(b.name for b in branches),
            dense=frozenset(b.name for b in branches if b.kind == "dense"),
            has_reranker=reranker is not None,
            rewriter_kind=rewriter_config.kind if rewriter_config is not None else None,
        ),
        prefetch=QueryPrefetch(
            branches,
            has_rewriter=rewriter_config is not None,
            include_original=rewriter_config is None or rewriter_config.include_original,
        ),
        rerank=rerank,
        loads_reranker=reranker is not None and not scorer_given,
        conversation_model=conversation_model
        or (make_chat_model(pipeline.conversation.llm) if pipeline.conversation.llm else None),
    )


def _retrieval_builder(parts: _Parts, output_schema: type, *, ends_at_fuse: bool) -> StateGraph:
    """A ``StateGraph`` holding the retrieval pipeline, up to and including ``fuse``."""
    pipeline, branches = parts.pipeline, parts.branches
    builder = StateGraph(
        RAGState, context_schema=RAGContext, input_schema=RAGRequest, output_schema=output_schema
    )
    entry_targets = ["retrieve"]
    if parts.rewriter is not None:
        rewriter_config = parts.rewriter_config
        node = RewriteNode(
            parts.rewriter,
            include_original=rewriter_config.include_original,
            on_failure=rewriter_config.on_failure or pipeline.on_failure,
        )
        # a worker thread under ainvoke, as LangGraph runs a sync function node
        builder.add_node("rewrite", GraphStep(node.invoke, name="rewrite", offload=True))
        builder.add_conditional_edges(
            "rewrite",
            make_view_router(branches, pipeline.tenant_field),
            ["retrieve"],
        )
        entry_targets = ["rewrite", "retrieve"]
    route = partial(
        make_entry_router, branches, pipeline.tenant_field, parts.rewriter is not None,
        parts.prefetch, scope=parts.scope,
    )  # fmt: skip
    # a conversation with earlier turns is resolved first; a first turn goes straight on
    contextualize = ContextualizeNode(parts.conversation_model).invoke
    builder.add_node(
        "contextualize",
        GraphStep(
            lambda state, config, runtime: contextualize(state, config),
            name="contextualize",
            offload=True,
        ),
    )
    builder.add_conditional_edges("contextualize", route(contextualize=False), entry_targets)
    builder.add_conditional_edges(
        START,
        route(contextualize=True),
        ["contextualize", *entry_targets],
    )

    reranks = parts.rerank is not None
    retrieve = RetrieveNode({b.name: b for b in branches}, rerank=reranks)
    # hybrid branches: retrieve -> fallback (a real edge Studio draws) -> rerank | fuse.
    # Both read a Send payload: input_schema keeps LangGraph from adding its keys to the state.
    to_fallback = ("fallback",) if any(b.falls_back for b in branches) else ()
    if to_fallback:
        builder.add_node(
            "fallback",
            GraphStep(FallbackNode(retrieve).invoke, name="fallback", offload=True),
            input_schema=RAGState,
            destinations=("rerank", "fuse") if reranks else None,
        )
        if not reranks:
            builder.add_edge("fallback", "fuse")
    if reranks:
        builder.add_node(
            "retrieve",
            _retrieve_node(retrieve),
            input_schema=RAGState,
            destinations=("rerank", "fuse", *to_fallback),
        )
        rerank = parts.rerank
        step = GraphStep(lambda task, config, runtime: rerank(task), name="rerank", offload=True)
        builder.add_node("rerank", step)
        builder.add_edge("rerank", "fuse")
    else:
        builder.add_node(
            "retrieve",
            _retrieve_node(retrieve),
            input_schema=RAGState,
            destinations=to_fallback or None,
        )
        builder.add_edge("retrieve", "fuse")

    # deferred: fuse waits for every pending branch task (rerank, fallback) before it runs
    fuse = make_fuse_node(
        k=pipeline.fusion.k,
        weights=pipeline.fusion.weights_for(sorted(parts.scope.dense)),
        method=pipeline.fusion.method,
        source="configuration" if configures_fusion(pipeline) else "default",
        # no fusion: block: the settings fitted to the corpus (graph/fitted_fusion.py)
        plan=fusion_plan(pipeline, parts.root, parts.scope.retrievers, parts.scope.dense),
    )
    # fuse is short CPU work: under ainvoke/astream it runs on the event loop, no thread hop;
    # no store is searched after it, so the run's held revisions go
    step = GraphStep(
        lambda state, config, runtime: fuse(state, runtime),
        name="fuse",
        ends_run=True,
        ends_request=ends_at_fuse,
    )
    builder.add_node("fuse", step, defer=True)
    return builder


def _graphs(
    parts: _Parts,
    graph: CompiledStateGraph,
    retrieval: CompiledStateGraph,
    *,
    uses_model: bool,
) -> RAGGraphs:
    branches = parts.branches
    uses_model = uses_model or any(b.kind == "dense" for b in branches) or parts.loads_reranker
    return RAGGraphs(
        graph=graph,
        retrieval=retrieval,
        knob_scope=parts.scope,
        embeddings=parts.pipeline.embeddings if uses_model else None,
        prefetch=parts.prefetch,
        retrievers=tuple((b.name, b.retriever) for b in branches),
    )


def _compile(builder: StateGraph, name: str, checkpointer: Checkpointer = None):
    return builder.compile(name=name, checkpointer=checkpointer)


def build_graphs(
    config: ConfigSource = None,
    *,
    answer: bool = True,
    retrievers: Mapping[str, BaseRetriever] | None = None,
    rewriter_model: BaseChatModel | None = None,
    generator_model: BaseChatModel | None = None,
    reranker_model: BaseChatModel | None = None,
    scorer: PairScorer | None = None,
    base_dir: str | os.PathLike | None = None,
    conversation_model: BaseChatModel | None = None,
    checkpointer: Checkpointer = None,
    name: str | None = None,
) -> RAGGraphs:
    """Compile a configuration's graphs from one set of components: the answer graph (the
    retrieval graph followed by ``generate``) as ``graph`` and the retrieval graph beside it as
    ``retrieval``; with ``answer=False``, the retrieval graph alone (both fields), which is
    the one given the ``checkpointer``. Arguments as for ``build_graph``; ``name`` defaults to
    "parallel-rag" (the retrieval graph beside it: "parallel-rag-retrieval") and, with
    ``answer=False``, to "parallel-rag-retrieval". What the surfaces serve: ``warm_up`` loads
    what a first request would, ``knob_scope`` says which per-run knobs the graphs honour."""
    parts = _parts(
        config, retrievers, rewriter_model, reranker_model, scorer, base_dir, conversation_model
    )
    retrieval_builder = _retrieval_builder(parts, RetrievalResult, ends_at_fuse=True)
    retrieval_builder.add_edge("fuse", END)
    if not answer:
        name = name or "parallel-rag-retrieval"
        retrieval = _compile(retrieval_builder, name, checkpointer)
        return _graphs(parts, retrieval, retrieval, uses_model=False)
    name = name or "parallel-rag"
    retrieval = _compile(retrieval_builder, f"{name}-retrieval")

    pipeline = parts.pipeline
    builder = _retrieval_builder(parts, RAGResult, ends_at_fuse=False)
    generator = make_generator(
        pipeline.generator, generator_model, pipeline.embeddings, base_dir=parts.root
    )
    generate = GenerateNode(
        generator, on_failure=pipeline.generator.on_failure or pipeline.on_failure
    )
    # the answer graph's last node: on a thread it clears the request fields (graph/request.py)
    step = GraphStep(
        lambda state, config, runtime: generate.invoke(state, config),
        name="generate",
        offload=True,
        ends_request=True,
    )
    builder.add_node("generate", step)
    builder.add_edge("fuse", "generate")
    builder.add_edge("generate", END)
    uses_model = (
        pipeline.generator.kind == "extractive" and pipeline.generator.min_similarity is not None
    )
    graph = _compile(builder, name, checkpointer)
    return _graphs(parts, graph, retrieval, uses_model=uses_model)


def build_retrieval_graph(
    config: ConfigSource = None,
    *,
    retrievers: Mapping[str, BaseRetriever] | None = None,
    rewriter_model: BaseChatModel | None = None,
    reranker_model: BaseChatModel | None = None,
    scorer: PairScorer | None = None,
    base_dir: str | os.PathLike | None = None,
    conversation_model: BaseChatModel | None = None,
    checkpointer: Checkpointer = None,
    name: str = "parallel-rag-retrieval",
) -> CompiledStateGraph:
    """Compile the retrieval graph alone ([contextualize] -> [rewrite] -> fan-out ->
    [fallback] -> [rerank] -> fuse): its output is ``RetrievalResult``, the fused documents
    with their account, and it never generates. Arguments as for ``build_graph``
    (``build_graphs(..., answer=False)`` gives it with what the surfaces need)."""
    return build_graphs(
        config,
        answer=False,
        retrievers=retrievers,
        rewriter_model=rewriter_model,
        reranker_model=reranker_model,
        scorer=scorer,
        base_dir=base_dir,
        conversation_model=conversation_model,
        checkpointer=checkpointer,
        name=name,
    ).graph


def build_graph(
    config: ConfigSource = None,
    *,
    retrievers: Mapping[str, BaseRetriever] | None = None,
    rewriter_model: BaseChatModel | None = None,
    generator_model: BaseChatModel | None = None,
    reranker_model: BaseChatModel | None = None,
    scorer: PairScorer | None = None,
    base_dir: str | os.PathLike | None = None,
    conversation_model: BaseChatModel | None = None,
    checkpointer: Checkpointer = None,
    name: str = "parallel-rag",
) -> CompiledStateGraph:
    """Compile the workflow: the retrieval graph followed by ``generate``, as
    ``StateGraph.compile()`` returns it. ``config`` is a ``PipelineConfig``, a mapping, a YAML
    path, or None (``$PARALLEL_RAG_CONFIG``, ./parallel-rag.yaml, else the embedded defaults).

    ``scorer`` is a ready pair scorer for the configured reranker, used instead of the one
    ``reranker.kind`` would load (its ``top_k``, ``max_candidates`` and ``on_failure`` still
    apply). The compiled graph validates its input and its run's knobs. ``build_graphs`` gives
    it together with its retrieval graph, compiled from the same components, for
    documents-only callers, which per-run knobs it honours and what ``warm_up`` loads.

    The graph takes a ``query`` or a conversation (``messages``) and appends its answer to the
    conversation. ``conversation_model`` (or ``conversation.llm`` in the configuration) writes
    follow-up questions out as standalone ones; without one, the subject is carried over from
    the earlier turns. ``checkpointer`` is any LangGraph checkpointer: runs with a
    ``thread_id`` then continue that thread's conversation. The LangGraph server supplies its
    own, so the ``langgraph.json`` graph brings none."""
    return build_graphs(
        config,
        retrievers=retrievers,
        rewriter_model=rewriter_model,
        generator_model=generator_model,
        reranker_model=reranker_model,
        scorer=scorer,
        base_dir=base_dir,
        conversation_model=conversation_model,
        checkpointer=checkpointer,
        name=name,
    ).graph
