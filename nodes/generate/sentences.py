"""The one sentence splitter: the extractive generator scores a chunk's sentences as it cuts
them here, ingest stores their vectors keyed by the same texts (``sentence_vectors``), and a
dense store that indexes sentences (Qdrant Edge's sentence shard) is handed this splitter by
ingest. They must cut a chunk into the same sentences for stored vectors to be found, so the
splitter lives with the generator that defines what a sentence is, and no backend owns it.
"""

from __future__ import annotations

import re

# a sentence ends at . ! or ? followed by a space and a capital, a digit or an opening mark
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
LIST_MARKER = re.compile(r"^[-*\u2022]\s+")
# A full stop that ends an abbreviation ends no sentence: an initialism ("the U.S. Army", "KKR &
# Co. L.P."), a title before a name ("Dr.", "St. Augustine"), a company suffix, "v." of a case
# name ("Rostker v. Goldberg"), "No." before a number, or a middle initial ("John F. Kennedy":
# one capital after a capitalised word or another initial; "the language B. Writing..." ends
# a sentence). Cutting there leaves two fragments that each say less than the sentence: the
# answer's name is torn from what is said about it.
ABBREVIATION = re.compile(
    r"(?:^|[\s(\[\"'])(?:(?:[A-Za-z]\.){2,}|"
    r"(?:Mr|Mrs|Ms|Dr|Prof|Rev|Hon|Sr|Jr|St|Mt|Ft|Gen|Col|Lt|Capt|Sgt|Maj|Adm|Gov|Sen|Rep|"
    r"Pres|Co|Corp|Inc|Ltd|Bros|No|Nos|Vol|vs|v|Jan|Feb|Mar|Apr|Aug|Sept?|Oct|Nov|Dec)\.)$"
)
INITIAL = re.compile(r"(?:^|(?:^|\s)[(\[\"']?(?:[A-Z][\w'\u2019-]*|[A-Z]\.)\s+)[A-Z]\.$")


def split_sentences(text: str) -> list[str]:
    """The sentences of a chunk: every line's sentences; markdown headings and short lines
    without closing punctuation (a title, a label) are not sentences, and a list marker is not
    part of one. A stop after an abbreviation (``ABBREVIATION``) or an initial
    (``INITIAL``) does not end a sentence."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = LIST_MARKER.sub("", line)
        if len(line.split()) < 5 and not line.endswith((".", "!", "?")):
            continue  # a title or label line, not a sentence
        parts: list[str] = []
        for part in SENTENCE_END.split(line):
            if parts and (ABBREVIATION.search(parts[-1]) or INITIAL.search(parts[-1])):
                parts[-1] = f"{parts[-1]} {part}"  # the stop ended an abbreviation
            else:
                parts.append(part)
        sentences.extend(part.strip() for part in parts if part.strip())
    return sentences
