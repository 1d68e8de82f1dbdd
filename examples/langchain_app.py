"""parallel-rag inside a LangChain app, both ways:

1. the compiled graph is a Runnable: ``chat_prompt | graph`` (the prompt's messages are the
   conversation), ``.with_config`` (per-run knobs), ``.batch``, ``.astream_events``;
2. ``ParallelFusionRetriever`` takes the place of ``EnsembleRetriever`` in a plain LCEL RAG chain
   (retriever -> prompt -> chat model), handing the chain fused documents with their sources.

Run it from the repo root (it ingests examples/corpus into a temporary folder first):

    python examples/langchain_app.py
    python examples/langchain_app.py --base-url http://127.0.0.1:8080/v1 --model smollm2

Without ``--base-url`` the chain's last step prints the prompt it would send, so the example
runs offline; with it, any OpenAI-compatible server (vLLM, Ollama, llama.cpp) answers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402
from parallel_rag.graph import build_graphs, load_config  # noqa: E402
from parallel_rag.graph.fusion_retriever import ParallelFusionRetriever  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
QUESTION = "Who built the first working transistor, and where?"

RAG_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer from the numbered context only and cite it like [1].\n\n{context}"),
        ("human", "{question}"),
    ]
)


def format_docs(docs) -> str:
    """Numbered evidence blocks; each says which branches found it."""
    blocks = []
    for number, doc in enumerate(docs, start=1):
        found_by = ", ".join(f"{s['retriever']} #{s['rank']}" for s in doc.metadata["sources"])
        blocks.append(f"[{number}] ({found_by})\n{doc.page_content}")
    return "\n\n".join(blocks)


def graph_as_runnable(graph) -> dict:
    """The compiled graph composed with LCEL: a prompt in front, knobs, batch, events."""
    ask = ChatPromptTemplate.from_messages([("human", "{question}")]) | graph
    answer = ask.invoke({"question": QUESTION})
    knobs = {"retrievers": ["lexical"], "fusion_method": "rrf", "fusion_k": 20}
    lexical_only = ask.with_config(configurable=knobs)
    lexical = lexical_only.invoke({"question": QUESTION})
    batch = graph.batch([{"query": "What is BM25?"}, {"query": "What did ENIAC compute?"}])

    async def node_events() -> list[str]:
        names = []
        async for event in graph.astream_events({"query": QUESTION}, version="v2"):
            if event["event"] == "on_chain_end" and event["name"] in {"retrieve", "fuse"}:
                names.append(event["name"])
        return names

    return {
        "answer": answer["answer"],
        "branches": [b["branch"] for b in answer["branches"]],
        "lexical_only_branches": [b["branch"] for b in lexical["branches"]],
        "batch_answers": [r["answer"] for r in batch],
        "events": asyncio.run(node_events()),
    }


def fusion_retriever_chain(graph, llm=None):
    """A classic LCEL RAG chain whose retriever is ``ParallelFusionRetriever`` (where an
    ``EnsembleRetriever(retrievers=[bm25, dense])`` used to be)."""
    retriever = ParallelFusionRetriever(graph=graph, top_k=4)
    model = llm or RunnableLambda(lambda prompt: prompt.to_string())  # offline: show the prompt
    return (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | RAG_PROMPT
        | model
        | StrOutputParser()
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-dir", help="an already ingested folder (default: ingest anew)")
    parser.add_argument("--base-url", help="OpenAI-compatible chat endpoint for the chain")
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args(argv)

    config, _ = load_config(None)
    if args.base_dir:
        base_dir = Path(args.base_dir)
    else:
        from parallel_rag.studio.ingestion import ingest_paths

        base_dir = Path(tempfile.mkdtemp(prefix="parallel-rag-example-"))
        ingest_paths([CORPUS], config, base_dir, progress=False)
    graphs = build_graphs(config, base_dir=base_dir)

    llm = None
    if args.base_url:
        from langchain_openai import ChatOpenAI

        llm = ChatOpenAI(model=args.model, base_url=args.base_url, api_key="not-needed")

    report = graph_as_runnable(graphs.graph)
    # the retriever runs the retrieval graph compiled beside the answer graph
    report["chain_output"] = fusion_retriever_chain(graphs, llm).invoke(QUESTION)
    for key, value in report.items():
        print(f"{key}: {value}")
    return report


if __name__ == "__main__":
    main()
