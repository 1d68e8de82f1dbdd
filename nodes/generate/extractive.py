"""The embedded extractive generator: the answer is the evidence sentences that answer the
query, each run cited ``[n]``; no model writes text. With no usable evidence it returns
``INSUFFICIENT_EVIDENCE``. The sentences' features are computed in ``sentence_scoring.py``, the
picking, ordering and quoting in ``answer_assembly.py``; this module holds the settings, the
fitted weights and the sentence vectors kept between requests.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from parallel_rag.nodes import prompts
from parallel_rag.nodes.generate.answer_assembly import (
    arrange_sentences,
    pick_sentences,
    quote_answer,
)
from parallel_rag.nodes.generate.citations import GeneratedAnswer
from parallel_rag.nodes.generate.questions import question_focus
from parallel_rag.nodes.generate.sentence_scoring import (
    candidate_sentences,
    cosine_similarities,
)

if TYPE_CHECKING:  # numpy loads with the first sentences embedded, not with the graph
    import numpy as np


class ExtractiveGenerator:
    """Picks the evidence sentences that answer the query and cites each one.

    Every sentence of the fused documents gets a score from eight features, each in 0..1:

    * ``similarity``: the embedding model's cosine with the query, over the best one's;
    * ``bm25``: BM25 of the query over the sentence with its document's title (whose subject
      "It" or "She" usually stands for; IDF from the candidate sentences), over the best one's;
    * ``rank``: the fused rank, as the geometric mean of 1/rank of the sentence's chunk and of
      the best-ranked chunk of its document (same source and title): the opening chunk of a
      document whose later chunk ranks first ("Zipf's law is ... inversely proportional to
      its rank") is as much about the question as that chunk; a document that is one chunk
      keeps 1/rank;
    * ``first``: the sentence opens its text (the first sentence of an article defines its
      subject, which is often the answer's entity; a later chunk's first sentence does not);
    * ``offers_answer``: it brings what the question asks for (a date for "when", a number for
      "how many", a name otherwise) beyond the question's own words;
    * ``title_in_query``: the question names the document's title;
    * ``bridge``: the document is the second hop of a two-step question: the question does
      not name its title, but a document the question names (or a top-three one) does;
    * ``continued``: the next sentence refers back to this one ("It is often described as...")
      and is similar to the query: what is said about a sentence's subject counts for it.

    The first seven weights are a logistic regression of "the sentence holds a gold answer" on
    those features (C 0.1, L2) fitted on HotpotQA dev questions 1-100 only (five-fold
    cross-validation there gave the same answer recall as the fit); ``continued`` was set by
    hand on the same questions and the example questions.

    A sentence can be picked when it shares at least ``min_term_overlap`` of the query's terms
    (its document's title counting) or its cosine similarity reaches ``min_similarity``. The
    best one is always kept; more follow in score order while the answer stays within
    ``max_words`` words and ``max_sentences`` sentences. A sentence that opens with a
    reference ("It was designed by...") brings the sentence that names its subject when that
    fits; otherwise, it is quoted after its document's title ("Millau Viaduct: It was
    designed by..."), or skipped when the document has none.

    A sentence is quoted without the clauses and parentheses that carry neither a term of the
    query nor a candidate of the asked kind (``trim_sentence``: dates of birth, pronunciations,
    appositives), each cut marked with ``ELISION``; the word budget counts what is quoted, so
    the room the cuts free goes to the next sentence. No model generates text: every word of
    the answer is evidence, in its order (or a document title), and each run of sentences from
    one document cites that document.

    When the question asks for a name, a document's opening sentence that does not spell its
    title (without a trailing disambiguation: "Kiss and Tell (1945 film)") is quoted after it
    ("Leo Varadkar: Leo Eric Varadkar ... is an Irish Fine Gael politician ..."): the subject
    an article opens with is often the answer, under its full or native name, and the title
    is the name it goes by (the words count against ``max_words``; ``name_by_title`` False
    turns it off). Not when the question names the title: it is the question's topic then.
    On HotpotQA dev questions 1-100 it put the answer's common name into 5 answers that
    quoted its entity under another (recall 0.58 -> 0.63, median words unchanged).

    The chosen sentences are quoted with the one most likely to carry the answer first
    (``arrange_sentences``): a question's own topic can fill the best-scored sentence ("In 1842 ...
    Menabrea published a paper ... describing the Analytical Engine") while the answer is in
    another that is an instance of what the question asks for ("Which algorithm...?": "Note G
    set out a step-by-step method ...").
    """

    follow_up_weights: dict[str, float] = {  # set on HotpotQA dev questions 1-100
        "named_by_pick": 1.0,
        "uncovered": 1.0,
    }
    """Added to a sentence's score for every pick after the first (see ``pick_sentences``):

    * ``named_by_pick``: a sentence already picked from another document names this one's
      document (its title, not named by the question): the second hop of a two-step question
      ("...formed in the city of Strasbourg" -> the Strasbourg article), whose sentences that
      carry a query term no pick does become candidates even when they share too little of
      the question to be eligible ("Strasbourg had 276,170 inhabitants");
    * ``uncovered``: the IDF-weighted query terms (function words aside) this sentence
      carries that no picked one does, over the best remaining sentence's: the part of the
      question still unanswered ("...has won how many tournaments worldwide?" once the record
      holder is named).

    On questions 1-100 answer recall was flat (0.64-0.66, from 0.63) for ``named_by_pick``
    0.5-1.5 and ``uncovered`` 1.0-1.5; 1.0 each is the middle of that plateau."""

    weights: dict[str, float] = {  # logistic regression on HotpotQA dev questions 1-100
        "similarity": 0.5,
        "bm25": 1.6,
        "rank": 0.8,
        "first": 0.7,
        "offers_answer": 0.8,
        "title_in_query": 0.2,
        "bridge": 1.1,
        "continued": 1.0,  # set by hand, not fitted
    }

    def __init__(
        self,
        max_sentences: int = 3,
        min_term_overlap: float = 0.25,
        embeddings: Callable[[], Any] | None = None,
        min_similarity: float = 0.3,
        sentence_cache_size: int = 20_000,
        max_words: int = 64,
        focus_weight: float = 3.0,
        name_by_title: bool = True,
        drop_furniture: bool = True,
        join_wrapped_lines: bool = True,
    ):
        self.name_by_title = name_by_title
        self.drop_furniture = drop_furniture
        self.join_wrapped_lines = join_wrapped_lines
        self.max_sentences = max_sentences
        self.min_term_overlap = min_term_overlap
        self.embeddings = embeddings
        self.min_similarity = min_similarity
        self.sentence_cache_size = sentence_cache_size
        self.max_words = max_words
        self.focus_weight = focus_weight
        self._sentence_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _sentence_matrix(self, model: Any, sentences: list[str]) -> np.ndarray:
        """Sentence vectors, embedding only those not seen lately: the same corpus sentences
        come back request after request, and embedding them dominated the cost of an answer.
        The cache is a bounded LRU (``sentence_cache_size`` vectors, float32), so memory stays
        flat however many requests are served."""
        import numpy as np  # with the first sentences embedded, not with the graph

        with self._cache_lock:
            cached = {s: self._sentence_vectors.get(s) for s in dict.fromkeys(sentences)}
            for sentence, vector in cached.items():
                if vector is not None:
                    self._sentence_vectors.move_to_end(sentence)
        missing = [s for s, vector in cached.items() if vector is None]
        if missing:
            fresh = np.asarray(model.embed_documents(missing), dtype=np.float32)
            cached.update(zip(missing, fresh, strict=True))
            if self.sentence_cache_size > 0:
                with self._cache_lock:
                    for sentence, vector in zip(missing, fresh, strict=True):
                        self._sentence_vectors[sentence] = vector
                    while len(self._sentence_vectors) > self.sentence_cache_size:
                        self._sentence_vectors.popitem(last=False)
        return np.stack([cached[s] for s in sentences])

    def _similarities(
        self, query: str, sentences: list[str]
    ) -> tuple[list[float], np.ndarray | None]:
        """Each sentence's cosine with the query, and the sentences' vectors (none without a
        model)."""
        if self.embeddings is None or not sentences:
            return [0.0] * len(sentences), None
        import numpy as np

        model = self.embeddings()
        query_vector = np.asarray(model.embed_query(query), dtype=np.float32)
        vectors = self._sentence_matrix(model, sentences)
        return cosine_similarities(vectors, query_vector).tolist(), vectors

    def generate(
        self, query: str, documents: Sequence[Mapping[str, Any]], config=None
    ) -> GeneratedAnswer:
        focus = question_focus(query) if self.focus_weight and self.embeddings else ""
        prefetch = getattr(self.embeddings(), "prefetch_query", None) if focus else None
        if prefetch is not None:  # encoded on a spare core while the sentences are scored
            prefetch(focus)
        sentences = candidate_sentences(
            query,
            documents,
            self._similarities,
            has_model=self.embeddings is not None,
            min_similarity=self.min_similarity,
            min_term_overlap=self.min_term_overlap,
            name_by_title=self.name_by_title,
            drop_furniture=self.drop_furniture,
            join_wrapped_lines=self.join_wrapped_lines,
        )
        chosen, labelled = pick_sentences(
            sentences,
            self.weights,
            self.follow_up_weights,
            max_sentences=self.max_sentences,
            max_words=self.max_words,
        )
        if not chosen:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        chosen = arrange_sentences(
            focus,
            sentences,
            chosen,
            labelled,
            focus_weight=self.focus_weight,
            embeddings=self.embeddings,
        )
        return quote_answer(chosen, labelled)
