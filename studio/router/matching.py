"""Which route a request takes: ``model`` naming a route selects it; ``model: "auto"`` tries
the routes' keywords on the last user message (whole words), then its cosine similarity (the
configured embedding model, the packaged MiniLM by default) to each route's description and
examples against the route's ``similarity_threshold`` (else ``routing.similarity_threshold``),
then ``routing.default``. An unknown model,
or ``auto`` with nothing matched and no default, is a 404."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from parallel_rag.backends.encoders.embeddings import load_embeddings
from parallel_rag.studio.router.configuration import AUTO_MODEL, RouterConfig
from parallel_rag.studio.router.errors import RouterError


def described(decision) -> list[str]:
    """The description as a matching text, unless the decision says it only documents (a
    decision translated from vLLM Semantic Router, which never matches on it)."""
    return [decision.description] if decision.match_description else []


@dataclass
class RouteChoice:
    name: str  # the chosen route (decision)
    reason: str  # model | keyword | similarity | default
    signals: dict[str, Any]


class RouteMatcher:
    """``auto`` routing over the decisions of one router config."""

    def __init__(self, config: RouterConfig):
        self.config = config
        self.decisions = config.decisions
        self.threshold = config.routing.similarity_threshold
        self._texts: dict[str, list[str]] = {
            name: [t for t in [*described(decision), *decision.examples] if t.strip()]
            for name, decision in self.decisions.items()
        }
        self.thresholds = {  # a route's own threshold (an upstream embedding signal's) or ours
            name: self.threshold if d.similarity_threshold is None else d.similarity_threshold
            for name, d in self.decisions.items()
        }
        self._vectors: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _model(self):
        settings = self.config.routing.embeddings
        return load_embeddings(settings.model, settings.device)

    def prepare(self) -> None:
        """Embed every route's description and examples (once, at start-up)."""
        import numpy as np

        with self._lock:
            if self._vectors is not None:
                return
            model = self._model()
            self._vectors = {
                name: np.asarray(model.embed_documents(texts), dtype=np.float32)
                for name, texts in self._texts.items()
                if texts
            }

    def keyword_hits(self, text: str) -> dict[str, list[str]]:
        lowered = text.casefold()
        hits = {}
        for name, decision in self.decisions.items():
            found = [
                kw
                for kw in decision.keywords
                if re.search(rf"(?<!\w){re.escape(kw.casefold())}(?!\w)", lowered)
            ]
            if found:
                hits[name] = found
        return hits

    def similarities(self, text: str) -> dict[str, float]:
        import numpy as np

        self.prepare()
        assert self._vectors is not None
        if not self._vectors or not text:
            return {}
        query = np.asarray(self._model().embed_query(text), dtype=np.float32)
        norm = float(np.linalg.norm(query)) or 1.0
        scores = {}
        for name, vectors in self._vectors.items():
            norms = np.linalg.norm(vectors, axis=1) * norm
            cosine = vectors @ query / np.where(norms == 0, 1, norms)
            scores[name] = round(float(cosine.max()), 4)
        return scores

    def choose(self, model: str, text: str) -> RouteChoice:
        if model != AUTO_MODEL:
            if model not in self.decisions:
                raise RouterError(
                    404,
                    f"The model '{model}' does not exist: use a route name "
                    f"({', '.join(self.decisions)}) or '{AUTO_MODEL}'",
                    code="model_not_found",
                    param="model",
                )
            return RouteChoice(model, "model", {"model": model})
        signals: dict[str, Any] = {"query": text[:200]}
        keywords = self.keyword_hits(text)
        signals["keywords"] = keywords
        if keywords:
            first = next(name for name in self.decisions if name in keywords)
            return RouteChoice(first, "keyword", signals)
        scores = self.similarities(text)
        signals["similarity"] = scores
        signals["threshold"] = self.threshold
        own = {n: t for n, t in self.thresholds.items() if t != self.threshold and n in scores}
        if own:
            signals["route_thresholds"] = own
        reached = {n: score for n, score in scores.items() if score >= self.thresholds[n]}
        if reached:
            best = max(reached, key=lambda name: reached[name])
            return RouteChoice(best, "similarity", signals)
        default = self.config.routing.default
        if default is None:
            raise RouterError(
                404,
                "no route matched this request and routing.default is not set",
                code="model_not_found",
                param="model",
            )
        return RouteChoice(default, "default", signals)
