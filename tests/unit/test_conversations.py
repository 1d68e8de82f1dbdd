"""Conversations: the graph takes ``messages``, resolves a follow-up before retrieval, appends
its answer, keeps threads per turn, and refuses malformed conversations naming the field."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from parallel_rag.graph.errors import problems
from parallel_rag.nodes.contextualize.carry_over import resolve
from parallel_rag.nodes.contextualize.history import (
    HISTORY_CHARS,
    HISTORY_TURNS,
    MAX_MESSAGES,
    Turn,
    answer_text,
    recent_turns,
)
from pydantic import ValidationError
from small_graphs import graph_of

JOURNAL = "What company published the Journal of Psychotherapy Integration?"
APA = "American Psychological Association."
FOLLOW_UP = "Who was the first president of it?"


def exchange(question: str, answer: str) -> list[Turn]:
    return [Turn("user", question), Turn("assistant", answer)]


# ---------------------------------------------------------------- LLM-free resolution


@pytest.mark.parametrize(
    ("turns", "question", "standalone"),
    [
        (
            exchange(JOURNAL, APA),
            FOLLOW_UP,
            "Who was the first president of American Psychological Association?",
        ),
        (  # the graph's own long answer: the name it introduces, not the question's
            exchange(
                JOURNAL,
                "The Journal of Psychotherapy Integration is a quarterly journal published by "
                "the American Psychological Association on behalf of the Society [1].",
            ),
            FOLLOW_UP,
            "Who was the first president of American Psychological Association?",
        ),
        (  # a question about X itself: "it" is X
            exchange("What is BM25?", "BM25 is a ranking function used by search engines [1]."),
            "Who invented it?",
            "Who invented BM25?",
        ),
        (
            exchange("Who played Corliss Archer in Kiss and Tell?", "Shirley Temple."),
            "What government position did she hold?",
            "What government position did Shirley Temple hold?",
        ),
        (
            exchange("Who directed Big Stone Gap?", "Adriana Trigiani."),
            "Where is her home city?",
            "Where is Adriana Trigiani's home city?",
        ),
        (
            exchange("Which city hosts the Louvre?", "Paris."),
            "What river runs there?",
            "What river runs in Paris?",
        ),
        (
            exchange("Who wrote Hamlet?", "William Shakespeare."),
            "And Macbeth?",
            "Who wrote Macbeth?",
        ),
        (  # a definite noun phrase of a kind of thing, in a short question with no name
            exchange("Which group recorded the album Nevermind?", "Nirvana."),
            "Who formed the band?",
            "Who formed the band (Nirvana)?",
        ),
        (
            exchange("Which player won the 1992 award?", "Peter Schmeichel."),
            "What did the IFFHS vote him in 1992?",  # "him" is not IFFHS
            "What did the IFFHS vote Peter Schmeichel in 1992?",
        ),
        (  # a short answer's leading preposition is not part of the name
            exchange("Where do the Maine Nordiques play?", "At the Androscoggin Bank Colisée."),
            "How many people can it seat?",
            "How many people can the Androscoggin Bank Colisée seat?",
        ),
    ],
)
def test_a_follow_up_is_written_out_with_its_subject(turns, question, standalone):
    resolution = resolve(question, turns)
    assert resolution.standalone == standalone
    assert resolution.resolved and resolution.subject and resolution.reason


@pytest.mark.parametrize(
    "question",
    [
        "Who designed the Analytical Engine?",  # a new topic that names itself
        "how does photosynthesis work in plants?",  # nothing points back
        "When did Nirvana form and where did they play first?",  # "they" is Nirvana
        "¿Quién fue su primer presidente?",  # another language: never rewritten
        "Is there a metro in Lyon?",  # existential "there"
        "How long does it take to boil an egg?",  # "it" points nowhere
        "What kind of instrument is the sarod?",  # "the" + a word that is not a kind of thing
        "And who directed the 2004 film Catwoman with Halle Berry?",  # "And", but whole
    ],
)
def test_a_self_contained_question_is_kept_as_written(question):
    turns = exchange("Hi there!", "Hello! How can I help?") + exchange(JOURNAL, APA)
    resolution = resolve(question, turns)
    assert resolution.standalone == question and not resolution.resolved


def test_small_talk_is_never_a_subject():
    turns = exchange("hi", "Hello! What would you like to know?")
    assert not resolve("What is it?", turns).resolved


def test_a_first_turn_is_never_resolved():
    resolution = resolve(FOLLOW_UP, [])
    assert resolution.standalone == FOLLOW_UP and resolution.reason.startswith("first turn")


# ---------------------------------------------------------------- the history read


def test_the_history_read_is_bounded_whatever_the_conversation_holds():
    long = [HumanMessage(f"question {i} " + "x" * 3000) for i in range(200)]
    turns = recent_turns([*long, HumanMessage("last")])
    assert len(turns) <= HISTORY_TURNS
    assert sum(len(t.text) for t in turns) <= HISTORY_CHARS


def test_the_sources_list_the_graph_appends_is_not_read_as_the_answer():
    message = AIMessage("APA published it. [1]\n\nSources:\n[1] journal.md\n[2] apa.md")
    assert answer_text(message) == "APA published it. [1]"


# ---------------------------------------------------------------- malformed conversations


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([], "messages"),
        ("hello", "messages"),
        ([{"role": "robot", "content": "hi"}], "messages.0.role"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "messages.0.content.0",
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "messages.1.role",
        ),
        ([{"role": "user", "content": "   "}], "messages.0.content"),
        ([{"role": "user", "content": "x" * 4001}], "messages.0.content"),
        ([{"role": "user", "content": "q", "colour": "red"}], "messages.0.colour"),
        ([{"role": "user", "content": 42}], "messages.0.content"),
        ([{"role": "user", "content": "q"}] * (MAX_MESSAGES + 1), "messages"),
    ],
)
def test_a_malformed_conversation_is_refused_naming_the_field(fakes, messages, field):
    watcher = fakes.ListRetriever()
    graph = graph_of({"a": watcher, "b": fakes.ListRetriever()})
    with pytest.raises(ValidationError) as caught:
        graph.invoke({"messages": messages})
    paths = [path for path, _ in problems(caught.value, {"messages": messages})]
    assert field in paths, paths
    assert watcher.queries == []  # refused before any retrieval


def test_a_question_and_a_different_conversation_are_refused(corpus):
    with pytest.raises(ValidationError, match="query"):
        graph_of(corpus(2)).invoke({"query": "a", "messages": [HumanMessage("b")]})


# ---------------------------------------------------------------- the graph on a conversation


def test_one_user_message_retrieves_exactly_what_the_query_retrieves(corpus):
    graph = graph_of(corpus(2))
    by_query = graph.invoke({"query": "What is the capital of France?"})
    for messages in (
        [{"role": "user", "content": "What is the capital of France?"}],
        [HumanMessage("What is the capital of France?")],
        [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}],
    ):
        by_messages = graph.invoke({"messages": messages})
        assert by_messages["documents"] == by_query["documents"]
        assert by_messages["queries"] == by_query["queries"]
        assert by_messages["resolution"]["method"] == "as_written"
    assert set(by_query["timings"]) == {"retrieve", "fuse", "generate"}  # no contextualize


def test_the_answer_joins_the_conversation_with_sources_and_no_evidence(corpus):
    result = graph_of(corpus(2)).invoke({"query": "What is the capital of France?"})
    question, answer = result["messages"]
    assert question.type == "human" and answer.type == "ai"
    assert answer.content.startswith(result["answer"])
    assert "Sources:\n[1] france.md" in answer.content
    assert answer.response_metadata["citations"] == result["citations"]
    for document in result["documents"]:  # the evidence stays in documents
        assert document["content"] not in answer.content.replace(result["answer"], "")


def test_a_follow_up_retrieves_on_its_resolution_and_as_written(fakes):
    lexical, dense = fakes.ListRetriever(), fakes.DenseListRetriever()
    graph = graph_of({"lexical": lexical, "dense": dense})
    result = graph.invoke(
        {
            "messages": [
                {"role": "user", "content": JOURNAL},
                {"role": "assistant", "content": APA},
                {"role": "user", "content": FOLLOW_UP},
            ]
        }
    )
    written = "Who was the first president of American Psychological Association?"
    assert sorted(lexical.queries) == sorted([written, FOLLOW_UP])
    assert [(q["text"], q["kind"]) for q in result["queries"]] == [
        (written, "original"),
        (FOLLOW_UP, "follow_up"),
    ]
    assert result["resolution"] == {
        "question": FOLLOW_UP,
        "retrieved_on": written,
        "method": "carry_over",
        "reason": "'it' refers back: carried 'American Psychological Association' over from "
        "the previous answer",
        "subject": "American Psychological Association",
    }
    assert "contextualize" in result["timings"]


def test_a_thread_remembers_and_each_turn_replaces_the_last_turns_records(corpus):
    graph = graph_of(corpus(2), checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    first = graph.invoke({"query": "Which city is the capital of France?"}, thread)
    second = graph.invoke({"query": "What river runs there?"}, thread)
    assert [m.type for m in second["messages"]] == ["human", "ai", "human", "ai"]
    assert second["resolution"]["method"] == "carry_over"
    assert len(second["branches"]) == len(first["branches"]) * 2  # two views, this turn only
    assert set(second["timings"]) == {"contextualize", "retrieve", "fuse", "generate"}
    state = graph.get_state(thread).values
    assert len(state["branch_results"]) == len(second["branches"])  # not piled up


def test_a_chat_model_writes_the_standalone_question_only_when_needed(fakes):
    lexical = fakes.ListRetriever()
    model = fakes.RecordingChatModel(responses=["Who was the first president of the APA?"])
    graph = graph_of({"lexical": lexical, "b": fakes.ListRetriever()}, conversation_model=model)
    graph.invoke({"query": FOLLOW_UP})  # a first turn: never called
    graph.invoke({"messages": [HumanMessage("hi"), AIMessage("Hello!"), HumanMessage(JOURNAL)]})
    assert model.calls == []  # self-contained after small talk: never called
    result = graph.invoke(
        {"messages": [HumanMessage(JOURNAL), AIMessage(APA), HumanMessage(FOLLOW_UP)]}
    )
    assert len(model.calls) == 1
    assert "Last question: " + FOLLOW_UP in model.calls[0][-1].content
    assert result["resolution"]["method"] == "chat_model"
    assert result["resolution"]["retrieved_on"] == "Who was the first president of the APA?"
    assert FOLLOW_UP in lexical.queries  # the question as written is still searched


def test_a_failing_chat_model_falls_back_to_the_carry_over(fakes):
    graph = graph_of(
        {"a": fakes.ListRetriever(), "b": fakes.ListRetriever()},
        conversation_model=fakes.ExplodingChatModel(),
    )
    result = graph.invoke(
        {"messages": [HumanMessage(JOURNAL), AIMessage(APA), HumanMessage(FOLLOW_UP)]}
    )
    assert result["resolution"]["method"] == "carry_over"
    assert any("conversation model failed" in w for w in result["warnings"])


def test_the_chat_generator_sees_the_conversation_before_the_evidence(corpus, fakes):
    model = fakes.RecordingChatModel(responses=["It is Paris [1]."])
    graph = graph_of(corpus(2), generator_model=model)
    result = graph.invoke(
        {
            "messages": [
                SystemMessage("be brief"),
                HumanMessage("Which country is Paris in?"),
                AIMessage("France."),
                HumanMessage("What is its capital?"),
            ]
        }
    )
    (sent,) = model.calls
    assert [m.type for m in sent] == ["system", "human", "ai", "human", "ai", "tool"]
    assert [m.content for m in sent[1:4]] == [
        "Which country is Paris in?",
        "France.",
        "What is France's capital?",  # the question retrieved on
    ]
    assert "Paris is the capital of France." in sent[-1].content  # evidence in the tool turn
    assert result["answer"] == "It is Paris [1]."
    assert [m.type for m in result["messages"]] == ["system", "human", "ai", "human", "ai"]
    assert "Paris is the capital" not in result["messages"][-1].content  # no evidence
