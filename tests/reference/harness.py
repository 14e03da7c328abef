"""Runs the real agent on a reference scenario and reads back what it did, in the reference's terms.

Only public surfaces: `Agent` and its four drivers, `Memory`'s API, the requests the model
received, and the stored rows read with `memproc.selectors.messages_recent`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import async_to_sync

from memproc import Agent, Memory, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message, ToolCallPart, ToolResultPart, part_to_json, thaw, to_openai
from memproc.models import thread_key
from memproc.processors import TokenLimiter, ToolCallFilter
from memproc.processors.memory_search import WIDENING_REFUSED, search_result
from memproc.processors.semantic_recall import cross_thread_message
from memproc.selectors.messages import messages_recent
from memproc.testing import HashEmbedder, ScriptedModel
from tests.reference.model import SEARCH_TOOL, Config, Expected, Msg, Round, Searched, Turn

DRIVERS = ("generate", "stream", "agenerate", "astream")
# Through the HTTP API, as the client that is the resource's user: no system input, no per-call
# options (the API takes neither), and for Chat Completions no message ids (the protocol has none).
API_DRIVERS = ("api-generate", "api-stream", "api-chat-completions", "api-aisdk")
API = "/api/memproc/"
INSTRUCTIONS = "You are the reference agent."
BLOCK_WORD = "forbidden"
WM_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "likes": {"type": "array", "items": {"type": "string"}},
        "home": {"type": "object"},
    },
}


@tool
def lookup(q: str) -> str:
    """Looks a topic up."""
    return f"facts about {q}"


@tool(requires_approval=True)
def gated_lookup(q: str) -> str:
    """Looks a topic up, once a person approved it."""
    return f"facts about {q}"


class InputGuard:
    """Blocks a turn whose new input says the block word (rule 4)."""

    id = "reference-input-guard"

    def process_input(self, ctx: Any) -> None:
        if any(BLOCK_WORD in m.text for m in ctx.input_messages):
            ctx.abort("blocked input")


class OutputGuard:
    """Blocks a turn whose final answer says the block word (rule 5)."""

    id = "reference-output-guard"

    def process_output_result(self, ctx: Any) -> None:
        if any(BLOCK_WORD in m.text for m in ctx.messages):
            ctx.abort("blocked output")


def build_memory(config: Config, embedder: HashEmbedder) -> Memory:
    recall: Any = False
    if config.recall is not None:
        r = config.recall
        recall = {
            "top_k": r.top_k,
            "message_range": {"before": r.before, "after": r.after},
            "scope": r.scope,
            "threshold": r.threshold,
        }
    working_memory: Any = False
    if config.working_memory is not None:
        working_memory = {"enabled": True, "scope": config.working_memory}
        if config.wm_schema:
            working_memory["schema"] = WM_SCHEMA
    return Memory(
        last_messages=config.last_messages,
        semantic_recall=recall,
        working_memory=working_memory,
        embedder=embedder,
        read_only=config.read_only,
        search_tool={"top_k": config.search_top_k} if config.search_top_k is not None else False,
        **({"history_tokens": config.history_tokens} if config.history_tokens else {}),
    )


def build_agent(
    config: Config, memory: Memory, model: ScriptedModel, *, agent_id: str = "reference"
) -> Agent:
    inputs: list[Any] = [InputGuard()]
    if config.history_by_hand:
        inputs.append(memory.processors()[0][[p.id for p in memory.processors()[0]].index("message-history")])
    if config.tool_filter:
        inputs.append(ToolCallFilter())
    if config.token_limit is not None:
        inputs.append(TokenLimiter(config.token_limit))
    return Agent(
        id=agent_id,
        instructions=INSTRUCTIONS,
        model=model,
        memory=memory,
        tools=[lookup, gated_lookup],
        input_processors=inputs,
        output_processors=[OutputGuard()],
    )


def script(rounds: Sequence[Round]) -> list[Any]:
    """The model's responses for a turn's rounds."""
    out: list[Any] = []
    for r in rounds:
        if r.calls:
            calls = [ToolCall(c.tool_call_id, c.tool_name, dict(_thaw(c.args))) for c in r.calls]
            out.append(ModelResponse(text=r.text, tool_calls=calls))
        else:
            out.append(r.text)
    return out


def call_input(turn: Turn, forms: Sequence[str]) -> list[Any]:
    """The turn's input as a caller would send it: a Message (with its id), a dict or a string."""
    given: list[Any] = []
    for m, form in zip(turn.inputs, forms, strict=True):
        if form == "message" or m.id is not None or len(m.parts) != 1 or m.role == "tool" or not m.text:
            given.append(Message.create(m.role, m.parts, **({"id": m.id} if m.id else {})))
        elif form == "dict":
            given.append({"role": m.role, "content": m.text})
        else:
            given.append(m.text if m.role == "user" else {"role": m.role, "content": m.text})
    return given


def run_api(client: Any, agent_id: str, driver: str, turn: Turn) -> dict[str, Any] | None:
    """One turn through the HTTP API; returns the tripwire (None when the turn was not blocked)."""
    if driver == "api-chat-completions":
        messages = [Message.create(m.role, m.parts) for m in turn.inputs]
        body = {"model": agent_id, "messages": to_openai(messages), "metadata": {"thread_id": turn.thread_id}}
        response = client.post(API + "v1/chat/completions", body, format="json")
        assert response.status_code == 200, response.content
        choice = response.json()["choices"][0]
        return (
            {"reason": choice["message"].get("refusal")}
            if choice["finish_reason"] == "content_filter"
            else None
        )
    if driver == "api-aisdk":  # useChat sending only its new messages (UI messages: ids, text parts)
        ui = [{"id": m.id, "role": m.role, "parts": [{"type": "text", "text": m.text}]} for m in turn.inputs]
        body = {"id": turn.thread_id, "messages": ui, "trigger": "submit-message"}
        response = client.post(f"{API}agents/{agent_id}/chat/", body, format="json")
        assert response.status_code == 200, response.content
        raw = b"".join(response.streaming_content).decode()
        frames = [json.loads(b.removeprefix("data: ")) for b in raw.split("\n\n") if b.startswith("data: {")]
        return next((f["data"] for f in frames if f["type"] == "data-tripwire"), None)
    messages = [
        {**({"id": m.id} if m.id else {}), "role": m.role, "parts": [part_to_json(p) for p in m.parts]}
        for m in turn.inputs
    ]
    body = {"messages": messages, "thread_id": turn.thread_id}
    kind = "generate" if driver == "api-generate" else "stream"
    response = client.post(f"{API}agents/{agent_id}/{kind}/", body, format="json")
    assert response.status_code == 200, response.content
    if kind == "generate":
        return response.json()["tripwire"]
    raw = b"".join(response.streaming_content).decode()
    events = [block for block in raw.split("\n\n") if block.strip()]
    last = events[-1]
    data = json.loads(last.split("data: ", 1)[1])
    return data if last.startswith("event: tripwire") else data.get("tripwire")


def run(agent: Agent, driver: str, messages: list[Any], turn: Turn) -> Any:
    """One turn through `driver`; returns the GenerateResult."""
    kwargs: dict[str, Any] = {"thread_id": turn.thread_id, "resource_id": turn.resource_id}
    if turn.options:
        kwargs["memory_options"] = dict(turn.options)
    if driver == "generate":
        return agent.generate(messages, **kwargs)
    if driver == "stream":
        events = list(agent.stream(messages, **kwargs))
        return events[-1].result
    if driver == "agenerate":
        return async_to_sync(agent.agenerate)(messages, **kwargs)

    async def drain() -> Any:
        last = None
        async for event in agent.astream(messages, **kwargs):
            last = event
        return last.result if last is not None else None

    return async_to_sync(drain)()


# --- reading back -----------------------------------------------------------------------------------


def to_msg(message: Message) -> Msg:
    return Msg(message.role, tuple(message.parts), id=message.id)


def shapes(messages: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [(m.role, m.text, _calls(m), _results(m)) for m in messages]


def _calls(m: Any) -> tuple[str, ...]:
    return tuple(c.tool_call_id for c in m.tool_calls) if isinstance(m, Message) else m.calls


def _results(m: Any) -> tuple[str, ...]:
    return tuple(r.tool_call_id for r in m.tool_results) if isinstance(m, Message) else m.results


def stored(resource_id: str, thread_id: str) -> list[Message]:
    return messages_recent(thread_key=thread_key(resource_id, thread_id), limit=100_000)


def system_kind(message: Message) -> str:
    if message.id.startswith("instructions"):
        return "instructions"
    return {
        "working-memory": "working-memory",
        "semantic-recall:other-threads": "recall",
    }.get(message.id, "input")


def working_memory_data(message: Message) -> str:
    text = message.text
    return text[
        text.rindex("<working_memory>\n") + len("<working_memory>\n") : text.rindex("\n</working_memory>")
    ]


def compare_turn(requests: Sequence[Any], expected: Expected, *, schema: bool, template: str) -> None:
    """The model's requests of one turn against the reference's."""
    got = [[m for m in r.messages if m.role != "system"] for r in requests]
    assert [shapes(r) for r in got] == [shapes(r) for r in expected.requests], "model requests differ"
    for got_request, want_request in zip(got, expected.requests, strict=True):
        for got_message, want_message in zip(got_request, want_request, strict=True):
            compare_search_results(got_message.tool_results, want_message.parts)
    if not requests:
        return
    system = [m for m in requests[0].messages if m.role == "system"]
    assert [system_kind(m) for m in system] == expected.system, "system messages differ"
    assert requests[0].messages[: len(system)] == system, "system messages come first"
    for m in system:
        if m.id == "working-memory":
            data = working_memory_data(m)
            want = expected.working_memory or ("{}" if schema else template)
            if schema:
                assert json.loads(data) == json.loads(want)
            else:
                assert data == want
        if m.id == "semantic-recall:other-threads":
            assert {r["id"] for r in m.metadata["recalled"]} == expected.cross_thread


def search_answerer(turn: Turn) -> Callable[[ToolCallPart, Searched], ToolResultPart]:
    """The tool result the reference's hits make, worded by memproc's own `search_result` from the
    stored rows (the reference decides which messages; memproc says how they read)."""

    def answer(call: ToolCallPart, searched: Searched) -> ToolResultPart:
        if searched.refused:
            return ToolResultPart(call.tool_call_id, SEARCH_TOOL, WIDENING_REFUSED, is_error=True)
        rows = {
            thread_id: {m.id: m for m in stored(turn.resource_id, thread_id)}
            for thread_id in {t for _, t, _ in searched.hits}
        }
        found = [(rows[t][i], score) for i, t, score in searched.hits]
        value = search_result(found, scope=searched.scope, thread_id=turn.thread_id)
        return ToolResultPart(call.tool_call_id, SEARCH_TOOL, value)

    return answer


def compare_search_results(got: Sequence[ToolResultPart], want: Sequence[Any]) -> None:
    """What each `search_memory` call answered against what the reference says it must."""
    wanted = {p.tool_call_id: p for p in want if isinstance(p, ToolResultPart) and p.tool_name == SEARCH_TOOL}
    for part in got:
        if part.tool_name != SEARCH_TOOL:
            continue
        expected = wanted[part.tool_call_id]
        assert part.is_error == expected.is_error, f"search_memory refused differently: {part.result!r}"
        assert thaw(part.result) == thaw(expected.result), "search_memory answered differently"


def system_tokens_counter(
    agent: Agent, memory: Memory, counter: Any, *, resource_id: str, read_only: bool
) -> Callable[..., int]:
    """Counts the system messages a turn's prompt will hold, worded by memproc's own processors."""

    def count(system_input: Sequence[Msg], wm: str | None, elsewhere: Sequence[Msg]) -> int:
        messages = [agent.instructions_message(), *(Message.create("system", m.parts) for m in system_input)]
        if wm is not None:
            processor = copy.copy(memory.working_memory_processor)
            processor.read_only = read_only
            messages.append(processor.system_message(wm))
        if elsewhere:
            threads = {m.thread_id for m in elsewhere}
            rows = {m.id: m for t in threads for m in stored(resource_id, t or "")}
            messages.append(cross_thread_message([rows[m.id] for m in elsewhere]))
        return sum(counter.count_message(m) for m in messages)

    return count


def _thaw(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value
