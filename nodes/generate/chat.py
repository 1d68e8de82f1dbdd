"""The chat-model generator: grounded, cited answers from any LangChain chat model. With no
evidence it returns ``INSUFFICIENT_EVIDENCE`` without calling the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from parallel_rag.nodes import prompts
from parallel_rag.nodes.contextualize.history import Turn
from parallel_rag.nodes.generate.citations import GeneratedAnswer, check_citations
from parallel_rag.nodes.generate.evidence import EVIDENCE_CALL_ID, format_evidence

InjectionMode = Literal["tool_role", "system_prompt"]


class ChatModelGenerator:
    """Grounded generation with any LangChain chat model (``ChatOpenAI`` for compatible servers).

    ``tool_role`` puts the evidence in a tool message answering an assistant tool call (both are
    sent, so strict OpenAI-compatible servers accept the history); ``system_prompt`` prepends it
    to the system message.
    """

    reads_history = True  # the generate node hands it the conversation's recent turns

    def __init__(
        self,
        model: BaseChatModel,
        *,
        injection_mode: InjectionMode = "tool_role",
        max_context_length: int = 10000,
        system_prompt: str = prompts.GENERATOR_SYSTEM_PROMPT,
    ):
        self.model = model
        self.injection_mode = injection_mode
        self.max_context_length = max_context_length
        self.system_prompt = system_prompt

    def build_messages(
        self,
        query: str,
        documents: Sequence[Mapping[str, Any]],
        history: Sequence[Turn] = (),
    ) -> list[BaseMessage]:
        """The conversation sent to the model: the recent turns (``history``, already bounded),
        then the question with its evidence placed by ``injection_mode``."""
        evidence = format_evidence(documents, self.max_context_length)
        earlier: list[BaseMessage] = [
            HumanMessage(t.text) if t.role == "user" else AIMessage(t.text) for t in history
        ]
        if self.injection_mode == "system_prompt":
            system = "\n\n".join(part for part in (evidence, self.system_prompt) if part)
            return [SystemMessage(system), *earlier, HumanMessage(query)]
        call_id = EVIDENCE_CALL_ID
        messages: list[BaseMessage] = (
            [SystemMessage(self.system_prompt)] if self.system_prompt else []
        )
        return (
            messages
            + earlier
            + [
                HumanMessage(query),
                # non-empty content: llama.cpp's server (and other strict ones) refuse a null
                # assistant content, and chat templates that ignore tool_calls still show a turn
                AIMessage(
                    content=prompts.EVIDENCE_TOOL_CALL_CONTENT,
                    tool_calls=[
                        {
                            "id": call_id,
                            "name": prompts.EVIDENCE_TOOL_NAME,
                            "args": {"query": query},
                        }
                    ],
                ),
                ToolMessage(evidence, tool_call_id=call_id, name=prompts.EVIDENCE_TOOL_NAME),
            ]
        )

    def generate(
        self,
        query: str,
        documents: Sequence[Mapping[str, Any]],
        config=None,
        history: Sequence[Turn] = (),
    ):
        """Call the model with the node's ``config`` (so LangGraph's messages stream sees its
        tokens); with no documents, answer without calling it."""
        if not documents:
            return GeneratedAnswer(prompts.INSUFFICIENT_EVIDENCE, [])
        message = self.model.invoke(self.build_messages(query, documents, history), config)
        generated = check_citations(message.text, len(documents))
        generated.message_id = message.id  # the answer turn keeps the streamed reply's id
        return generated
