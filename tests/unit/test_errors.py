"""The one error renderer (graph/errors.py): every shape of pydantic error, and the project's
own field errors, become ``(path, message)`` pairs with the path written in the input, one
clean line of message, secrets redacted; the OpenAI-style body and the public 422 detail."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from parallel_rag.backends.shared.secrets import register_secrets
from parallel_rag.graph.errors import (
    ConfigError,
    FieldError,
    one_line,
    openai_error,
    problem_lines,
    problems,
    public_details,
)
from parallel_rag.graph.state import RAGRequest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class Lexical(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["bm25"]
    name: str
    top_k: int = 5


class Dense(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["qdrant"]
    name: str
    collection: str = "docs"

    @model_validator(mode="after")
    def _collection(self) -> Dense:
        if self.collection == "bad":
            raise ValueError("collection: 'bad' is reserved")
        if self.collection == "field":
            raise FieldError("collection", "'field' is reserved")
        return self


Entry = Annotated[Lexical | Dense, Field(discriminator="backend")]


class Part(BaseModel):
    text: str


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retrievers: list[Entry] = Field(default_factory=list, max_length=2)
    content: str | list[Part] = ""
    weights: dict[Annotated[str, Field(max_length=3)], float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> Config:
        names = [entry.name for entry in self.retrievers]
        if len(set(names)) < len(names):
            raise ValueError(f"duplicate retriever names {names}")
        return self


BM25 = {"backend": "bm25", "name": "lexical"}
QDRANT = {"backend": "qdrant", "name": "dense"}


def refused(data: dict, **kwargs) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        Config.model_validate(data)
    return problems(caught.value, data, **kwargs)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"retrievers": [{"backend": "bm25"}]}, [("retrievers.0.name", "Field required")]),
        (
            {"retreivers": []},
            [("retreivers", "Extra inputs are not permitted")],
        ),
        (
            {"retrievers": [BM25, {**QDRANT, "top-k": 5}]},
            [("retrievers.1.top-k", "Extra inputs are not permitted")],
        ),
        (
            {"retrievers": [{**BM25, "top_k": "many"}]},
            [
                (
                    "retrievers.0.top_k",
                    "Input should be a valid integer, unable to parse string as an integer",
                )
            ],
        ),
        (
            {"retrievers": [BM25, {**QDRANT, "collection": "bad"}]},
            [("retrievers.1", "collection: 'bad' is reserved")],
        ),
        (
            {"retrievers": [BM25, {**QDRANT, "collection": "field"}]},
            [("retrievers.1.collection", "'field' is reserved")],
        ),
        (
            {"retrievers": [BM25, BM25]},
            [("", "duplicate retriever names ['lexical', 'lexical']")],
        ),
        (
            {"retrievers": [{"backend": "elastic", "name": "es"}]},
            [
                (
                    "retrievers.0",
                    "Input tag 'elastic' found using 'backend' does not match any of the "
                    "expected tags: 'bm25', 'qdrant'",
                )
            ],
        ),
        (
            {"retrievers": [{"name": "x"}]},
            [("retrievers.0", "Unable to extract tag using discriminator 'backend'")],
        ),
        (
            {"retrievers": [BM25, QDRANT, BM25]},
            [("retrievers", "List should have at most 2 items after validation, not 3")],
        ),
        (
            {"content": 5},
            [("content", "Input should be a valid string or a valid list")],
        ),
        (
            {"content": [{"txt": "x"}]},
            [("content", "Input should be a valid string"), ("content.0.text", "Field required")],
        ),
        ({"weights": {"long": 1.0}}, [("weights.long", "String should have at most 3 characters")]),
        (
            {"weights": {"a": "x"}},
            [("weights.a", "Input should be a valid number, unable to parse string as a number")],
        ),
    ],
    ids=[
        "missing",
        "extra",
        "extra-nested",
        "bad-type",
        "model-validator-value-error",
        "model-validator-field-error",
        "root-validator",
        "unknown-tag",
        "no-tag",
        "too-many",
        "union-members-merged",
        "union-member-model",
        "dict-key",
        "dict-value",
    ],
)
def test_every_shape_becomes_a_path_in_the_input_and_a_clean_message(data, expected):
    assert refused(data) == expected


def test_without_the_input_type_labels_are_still_left_out():
    with pytest.raises(ValidationError) as caught:
        RAGRequest.model_validate({"query": "q", "filters": {"a": [1]}})
    assert problems(caught.value) == [
        (
            "filters.a",
            "Input should be a valid string or a valid boolean or a valid integer or a valid "
            "number",
        )
    ]


def test_the_prefix_starts_every_path():
    assert refused({"retrievers": [{"backend": "bm25"}]}, prefix="configurable") == [
        ("configurable.retrievers.0.name", "Field required")
    ]


def test_a_nested_validation_is_carried_under_the_validator_location():
    class Outer(BaseModel):
        plugin: dict

        @model_validator(mode="after")
        def _inner(self) -> Outer:
            try:
                Config.model_validate(self.plugin)
            except ValidationError as error:
                raise FieldError.of(problems(error, self.plugin, prefix="plugin")) from None
            return self

    data = {"routes": [{"plugin": {"retrievers": [{"backend": "bm25"}], "x": 1}}]}

    class Routes(BaseModel):
        routes: list[Outer]

    with pytest.raises(ValidationError) as caught:
        Routes.model_validate(data)
    assert problems(caught.value, data) == [
        ("routes.0.plugin.retrievers.0.name", "Field required"),
        ("routes.0.plugin.x", "Extra inputs are not permitted"),
    ]


def test_secrets_are_redacted_and_messages_bounded_to_one_line():
    register_secrets(["sk-errors-one-secret"])
    detail = {"loc": ("a",), "msg": "Value error, said:\n  key sk-errors-one-secret " + "x" * 2000}
    ((path, message),) = problems([detail])
    assert path == "a" and message.startswith("said: key *** xxx")
    assert "\n" not in message and len(message) <= 500
    body = openai_error("key sk-errors-one-secret refused", "invalid_request_error", "bad")
    assert body == {
        "error": {
            "message": "key *** refused",
            "type": "invalid_request_error",
            "param": None,
            "code": "bad",
        }
    }


def test_field_and_config_errors_keep_their_pairs():
    knob = FieldError("configurable.fusion_k", "Input should be greater than 0")
    assert str(knob) == "configurable.fusion_k: Input should be greater than 0"
    assert knob.problems == (("configurable.fusion_k", "Input should be greater than 0"),)
    pairs = refused({"retrievers": [{"backend": "bm25"}], "x": 1})
    config = ConfigError.invalid("configuration", "a.yaml", pairs)
    assert str(config) == (
        "invalid configuration in a.yaml:\n"
        "  retrievers.0.name: Field required\n"
        "  x: Extra inputs are not permitted"
    )
    assert config.problems == tuple(pairs)
    assert one_line(pairs) == "retrievers.0.name: Field required; x: Extra inputs are not permitted"
    assert problem_lines([("", "whole input")]) == ["whole input"]


def test_fastapi_details_are_read_and_made_public():
    details = [
        {
            "type": "string_too_long",
            "loc": ("body", "input", "query"),
            "msg": "String should have at most 5 characters",
            "input": "q" * 5000,
            "ctx": {"max_length": 5},
            "url": "https://errors.pydantic.dev/2/v/string_too_long",
        }
    ]
    assert problems(details) == [("body.input.query", "String should have at most 5 characters")]
    assert public_details(details) == [
        {
            "type": "string_too_long",
            "loc": ("body", "input", "query"),
            "msg": "String should have at most 5 characters",
        }
    ]
    assert public_details(["not a dict"]) == [{"msg": "not a dict"}]
