"""A router recipe in the rag plugin's printed shapes (a model catalog, a reranker binding, the
rag plugin blocks as the plugin prints them, a parallel pipeline, routes without retrieval) for
the router's unit tests."""

from __future__ import annotations

import yaml

SEED_RECIPE = """
global:
  model_catalog:
    deployments:
      document-ranker:
        provider: model_runtime
        artifact: vllm-sr/Vela-1.0-Encoder-307M-Reranker
        device: cpu
        input:
          max_tokens: 4096
          overflow: reject
upstream:
  base_url: http://127.0.0.1:8080/v1
routing:
  default: chat
  model_bindings:
    rag.reranker:
      deployment: document-ranker
      contract: relevance_scores.v1
      pair_scorer:
        layer: 22
        dimension: 768
  decisions:
    - name: milvus-docs
      model: smollm2
      plugins:
        - type: rag
          configuration:
            enabled: true
            backend: milvus
            top_k: 5
            similarity_threshold: 0.78
            injection_mode: tool_role
            on_failure: warn
            backend_config:
              collection: docs
              reuse_cache_connection: true
              content_field: content
    - name: qdrant-docs
      model: smollm2
      plugins:
        - type: rag
          configuration:
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
    - name: ranked
      model: smollm2
      plugins:
        - type: rag
          configuration:
            enabled: true
            backend: vectorstore
            backend_config:
              vector_store_id: vs-your-documents
            top_k: 10
            rerank:
              top_k: 3
            on_failure: block
    - name: parallel
      model: smollm2
      description: questions about the docs
      examples: ["what is bm25?"]
      keywords: [bm25]
      upstream:
        base_url: http://127.0.0.1:9000/v1
        api_key_env: ROUTE_KEY
        timeouts: {read: 5}
      plugins:
        - type: rag
          configuration:
            retrievers:
              - {name: lexical, backend: bm25}
              - {name: dense, backend: qdrant, similarity_threshold: 0.2}
            fusion: {method: rrf, k: 30}
            top_k: 4
            injection_mode: system_prompt
            max_context_length: 2000
    - name: chat
      model: smollm2
    - name: disabled
      model: smollm2
      plugins:
        - type: rag
          configuration: {enabled: false, backend: qdrant}
"""


def recipe() -> dict:
    return yaml.safe_load(SEED_RECIPE)
