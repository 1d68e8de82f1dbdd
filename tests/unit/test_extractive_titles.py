"""The extractive generator names an article's subject by its title when the opening sentence
quotes it under another name and the question asks for a name."""

from __future__ import annotations

from parallel_rag.nodes.generate.extractive import ExtractiveGenerator

QUESTION = "Which gospel singer born in July did David Huntsinger work with?"
OPENING = "Larnelle Steward Harris (born July 6, 1947) is an American gospel singer."
PIANIST = "David Huntsinger is a pianist and arranger who worked with many gospel singers."


def documents(title: str) -> list[dict]:
    return [
        {"id": "harris", "content": OPENING, "metadata": {"title": title}},
        {"id": "huntsinger", "content": PIANIST, "metadata": {"title": "David Huntsinger"}},
    ]


def test_an_opening_sentence_that_does_not_spell_its_title_is_quoted_after_it():
    answer = ExtractiveGenerator().generate(QUESTION, documents("Larnelle Harris")).answer
    # the name the singer goes by is in the answer, not only "Larnelle Steward Harris"
    assert answer.startswith("Larnelle Harris: Larnelle Steward Harris")
    assert (
        "Larnelle Harris"
        not in ExtractiveGenerator(name_by_title=False)
        .generate(QUESTION, documents("Larnelle Harris"))
        .answer
    )


def test_no_title_label_when_the_sentence_spells_it_or_the_question_names_it():
    generator = ExtractiveGenerator()
    # the title less its disambiguation is in the sentence: quoted as it is
    spelled = generator.generate(QUESTION, documents("Larnelle Steward Harris (singer)")).answer
    assert spelled.startswith(OPENING) or f" {OPENING}" in spelled
    assert "(singer)" not in spelled
    # the question names the pianist's article: its opening is its topic, not an answer
    pianist = [
        {
            "id": "huntsinger",
            "content": "Dave Huntsinger is a pianist.",
            "metadata": {"title": "David Huntsinger"},
        },
    ]
    assert "David Huntsinger:" not in generator.generate(QUESTION, pianist).answer


def test_no_title_label_for_a_date_question():
    answer = (
        ExtractiveGenerator()
        .generate("When was the gospel singer Larnelle Steward born?", documents("Larnelle Harris"))
        .answer
    )
    assert "Larnelle Harris:" not in answer
