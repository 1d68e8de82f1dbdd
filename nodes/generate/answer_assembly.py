"""Answer assembly for the extractive generator (``extractive.py``): which scored sentences
the answer quotes (``pick_sentences``, with what the picks leave open: ``follow_up``; the rest
of a sentence a line break cut: ``whole_sentences``), in which order (``arrange_sentences``),
and the quoted text with one citation per run of one document (``quote_answer``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from parallel_rag.nodes.generate.citations import GeneratedAnswer
from parallel_rag.nodes.generate.sentence_scoring import CandidateSentence, cosine_similarities


def find_antecedent(
    sentence: CandidateSentence, place: Mapping[tuple[int, int], CandidateSentence]
) -> CandidateSentence | None:
    """The nearest earlier sentence of the same document that names its own subject."""
    position = sentence.position - 1
    while (candidate := place.get((sentence.number, position))) is not None:
        if not candidate.features["anaphor"]:
            return candidate
        position -= 1
    return None


def pick_sentences(
    sentences: list[CandidateSentence],
    weights: Mapping[str, float],
    follow_up_weights: Mapping[str, float],
    *,
    max_sentences: int,
    max_words: int,
) -> tuple[list[CandidateSentence], set[int]]:
    """The best sentence, then more in score order within the word and sentence budgets,
    so one sentence that carries the answer beats several that merely share its words.
    A sentence opening with a reference
    comes after its antecedent when that fits, else labelled with its document's title,
    else not at all. A sentence that names nothing of the asked kind beyond the question
    ("Mendeleev left gaps and predicted that unknown elements would be found") brings the
    next sentence of its document when that one refers back to it and does ("He called
    three of them eka-aluminium, eka-boron and eka-silicon"), if both fit. After each pick
    the rest are ranked again with ``follow_up_weights``: what the picks leave open counts
    from the second pick on. Returns the sentences in choice order and the ids of the
    labelled ones."""
    for sentence in sentences:
        sentence.score = sum(weights.get(k, 0.0) * v for k, v in sentence.features.items())
    base = {id(s): s.score for s in sentences}
    place = {(s.number, s.position): s for s in sentences}
    eligible = [s for s in sentences if s.eligible]
    chosen: list[CandidateSentence] = []
    labelled: set[int] = set()
    words = 0

    def units(group: list[CandidateSentence]) -> int:  # the pieces of a wrapped sentence count once
        return sum(not (s.wraps and place.get((s.number, s.position - 1)) in group) for s in group)

    def add(sentence: CandidateSentence) -> bool:
        nonlocal words
        if sentence in chosen:
            return False
        group, size, label = [sentence], sentence.words, False
        following = place.get((sentence.number, sentence.position + 1))
        if (
            not sentence.offers
            and not sentence.features["anaphor"]
            and following is not None
            and following.offers
            and following.features["anaphor"]
            and following not in chosen
            and units(chosen) + 2 <= max_sentences
            and words + size + following.words <= max_words
        ):  # what the sentence leaves open, its continuation names
            group, size = [sentence, following], size + following.words
        if sentence.features["anaphor"]:
            antecedent = find_antecedent(sentence, place)
            fits = antecedent is not None and (
                antecedent in chosen
                or (
                    units(chosen) + 2 <= max_sentences
                    and words + size + antecedent.words <= max_words
                )
            )
            if fits and antecedent not in chosen:
                group, size = [antecedent, sentence], size + antecedent.words
            elif not fits and sentence.title:
                label, size = True, size + len(sentence.title.split())
            elif not fits and antecedent is not None and not chosen:
                # the best sentence is always kept, with what names its subject
                group, size = [antecedent, sentence], size + antecedent.words
            elif not fits:
                return False  # nothing says who "it" is
        whole = whole_sentences(group, place, chosen, max_words // 2)
        extra = sum(s.words for s in whole) - sum(s.words for s in group)
        if units(chosen + whole) <= max_sentences and (
            not chosen or words + size + extra <= max_words
        ):  # a wrapped line is quoted with the rest of its sentence when that fits
            group, size = whole, size + extra
        if units(chosen + group) > max_sentences or (chosen and words + size > max_words):
            return False
        chosen.extend(group)
        words += size
        if label:
            labelled.add(id(sentence))
        return True

    while units(chosen) < max_sentences:
        if chosen:
            eligible += follow_up(sentences, chosen, base, follow_up_weights)
        ranked = sorted(
            (s for s in eligible if s not in chosen),
            key=lambda s: (-s.score, s.number, s.position),
        )
        if not any(add(sentence) for sentence in ranked):
            break
    # what a sentence scores as an answer (the order ``arrange_sentences`` quotes in): its own
    # score, and the second hop's weight; covering what the picks left open is not
    # answering it (with that too, a question's other half came first: 0.49 of 1-100
    # answers opened with a gold answer, against 0.51)
    named = follow_up_weights.get("named_by_pick", 0.0)
    for sentence in sentences:
        sentence.score = base[id(sentence)] + named * sentence.named_by_pick
    return chosen, labelled


def whole_sentences(
    group: list[CandidateSentence],
    place: Mapping[tuple[int, int], CandidateSentence],
    chosen: list[CandidateSentence],
    limit: int,
) -> list[CandidateSentence]:
    """``group`` with the pieces its ends wrap into or from (``CandidateSentence.wraps``): the lines
    its last sentence runs into ("The *cif* in `ffi_cif` stands for" -> "Call InterFace."),
    then the lines that run into its first, none already chosen, while the whole stays
    within ``limit`` words: a long sentence a page cut in five lines would otherwise take
    the room of the next answering sentence (on the conversion quality set, without the
    limit, "ASN1_MAX_NAME_SIZE is the maximum number of..." no longer fitted)."""
    words = sum(s.words for s in group)
    after: list[CandidateSentence] = []
    last = group[-1]
    while (following := place.get((last.number, last.position + 1))) is not None:
        if not following.wraps or following in chosen + group or words + following.words > limit:
            break
        after.append(following)
        words += following.words
        last = following
    before: list[CandidateSentence] = []
    first = group[0]
    while first.wraps and (previous := place.get((first.number, first.position - 1))):
        if previous in chosen + group or words + previous.words > limit:
            break
        before.insert(0, previous)
        words += previous.words
        first = previous
    return before + group + after


def follow_up(
    candidates: list[CandidateSentence],
    chosen: list[CandidateSentence],
    base: Mapping[int, float],
    follow_up_weights: Mapping[str, float],
) -> list[CandidateSentence]:
    """Score the candidates not chosen yet as their base score plus what they add to the
    picks (``follow_up_weights``); a chosen sentence keeps the score it was chosen at.
    Returns the sentences that become eligible now: those of a document a pick names
    that carry a query term no pick does, however little of the question they share."""
    covered = {t for c in chosen for t in c.carried}
    picked = [(c.number, " ".join(c.text.lower().split())) for c in chosen]
    rest = [s for s in candidates if s not in chosen]
    uncovered = {id(s): sum(v for t, v in s.carried.items() if t not in covered) for s in rest}
    top = max(uncovered.values(), default=0.0) or 1.0
    weight = follow_up_weights
    followed = []
    for s in rest:
        named = s.named_by_pick = bool(s.subject) and any(
            n != s.number and s.subject in text for n, text in picked
        )
        s.score = (
            base[id(s)]
            + weight.get("named_by_pick", 0.0) * named
            + weight.get("uncovered", 0.0) * uncovered[id(s)] / top
        )
        if named and weight.get("named_by_pick", 0.0) and uncovered[id(s)] and not s.eligible:
            # the second hop's sentence need not share the first hop's words
            s.eligible = True
            followed.append(s)
    return followed


def arrange_sentences(
    focus: str,
    sentences: list[CandidateSentence],
    chosen: list[CandidateSentence],
    labelled: set[int],
    *,
    focus_weight: float,
    embeddings: Callable[[], Any] | None,
) -> list[CandidateSentence]:
    """The chosen sentences in the order the answer quotes them: runs that read together
    stay together in document order (a sentence after the one it refers back to or
    follows), and the runs go by the likelihood that they carry the answer: the score
    plus ``focus_weight`` times the cosine of the sentence with ``focus``, the noun a
    "which/what <noun>" question asks for (``question_focus``; over the best sentence's),
    so "Note G set out a step-by-step method..." opens the answer to "Which algorithm did
    Ada Lovelace publish...?" before the paper that named the engine. On HotpotQA dev
    questions 1-100 a gold answer opens the answer for 0.37 of the questions by score
    alone (0.35 in choice order, before runs were kept together) and 0.39/0.41/0.41 with
    the focus at weights 2/3/4. Leaving the document-picking features (fused rank, title
    named) out of this order reached 0.41-0.44 there but lost the opening answer on
    held-out questions (0.419 -> 0.381 on 101-500): not kept."""
    place = {(s.number, s.position): s for s in sentences}
    runs: list[list[CandidateSentence]] = []
    run_of: dict[int, int] = {}
    for sentence in chosen:
        home = None
        if sentence.features["anaphor"] and id(sentence) not in labelled:
            antecedent = find_antecedent(sentence, place)
            home = run_of.get(id(antecedent)) if antecedent is not None else None
        if home is None:
            before = place.get((sentence.number, sentence.position - 1))
            home = run_of.get(id(before)) if before is not None else None
        if home is None:
            runs.append([sentence])
            home = len(runs) - 1
        else:
            runs[home].append(sentence)
        run_of[id(sentence)] = home
    if len(runs) < 2:
        return chosen
    for run in runs:
        run.sort(key=lambda s: s.position)
    focus_of = {id(s): 0.0 for s in chosen}
    if focus and all(s.vector is not None for s in sentences):
        import numpy as np  # with the sentence vectors, which are numpy arrays

        focus_vector = np.asarray(embeddings().embed_query(focus), dtype=np.float32)
        matrix = np.stack([s.vector for s in sentences])
        cosines = np.maximum(cosine_similarities(matrix, focus_vector), 0.0)
        top = float(cosines.max())
        if top > 0:  # over the best sentence's, as the query similarity is
            best = {id(s): float(c) / top for s, c in zip(sentences, cosines, strict=True)}
            focus_of = {id(s): best[id(s)] for s in chosen}

    def lead(sentence: CandidateSentence) -> float:
        return sentence.score + focus_weight * focus_of[id(sentence)]

    keys = [max(lead(s) for s in run) for run in runs]
    order = sorted(range(len(runs)), key=lambda i: (-keys[i], i))
    return [s for i in order for s in runs[i]]


def quote_answer(chosen: list[CandidateSentence], labelled: set[int]) -> GeneratedAnswer:
    """The chosen sentences in their order, each labelled one after its document's title and
    one quoted after the name its subject goes by (``named_as``), one citation ``[n]`` per run
    of sentences of one document."""
    parts: list[str] = []
    for i, sentence in enumerate(chosen):
        label = f"{sentence.title}: " if id(sentence) in labelled else ""
        if not label and sentence.named_as:
            label = f"{sentence.named_as}: "
        parts.append(label + (sentence.shown or sentence.text))
        following = chosen[i + 1] if i + 1 < len(chosen) else None
        if following is None or (following.number, following.position) != (
            sentence.number,
            sentence.position + 1,
        ):
            parts[-1] += f" [{sentence.number}]"  # one citation per run of one document
    numbers = list(dict.fromkeys(s.number for s in chosen))
    return GeneratedAnswer(" ".join(parts), numbers)
