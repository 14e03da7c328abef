"""Rule 16 on real agents: every request a model receives is a valid conversation, whatever memory
configuration and processors (automatic or hand-placed, in any order) the agent has, and a turn
stores exactly its own new messages once (rules 11, 13, 17).

The invariants are `assert_valid_prompt` of tests/processors/test_conversation_properties.py.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memproc import Memory, tool
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart, to_messages
from memproc.models import Message as StoredMessage
from memproc.models import thread_key
from memproc.processors import MessageHistory, SemanticRecall, TokenLimiter, ToolCallFilter
from memproc.processors.semantic_recall import cross_thread_message
from memproc.processors.tokens import get_token_counter
from memproc.selectors.messages import messages_recent
from memproc.testing import HashEmbedder, ScriptedModel
from tests.processors.test_conversation_properties import BASE, TOPICS, assert_valid_prompt, threads

pytestmark = pytest.mark.django_db

INSTRUCTIONS = "You are a test agent."


@tool
def lookup(q: str) -> str:
    """Looks a topic up."""
    return f"facts about the {q}"


def stored_ids(thread_id: str) -> list[str]:
    return list(
        StoredMessage.objects.filter(thread__public_id=thread_id)
        .order_by("sequence")
        .values_list("public_id", flat=True)
    )


def assert_turn(model: ScriptedModel, result: Any, *, thread_id: str, before: list[str]) -> None:
    """Every request of the turn is valid; the thread grew by exactly the turn's saved messages."""
    assert result.tripwire is None
    new_ids = [m.id for m in result.messages if m.role == "user"]
    for request in model.requests:
        assert_valid_prompt(request.messages, new_input_ids=new_ids, memory_ids=set(before))
    after = stored_ids(thread_id)
    assert after == before + [m.id for m in result.messages]
    assert len(set(after)) == len(after)


def tool_rounds(prefix: str, topic: str, rounds: int, answer: str) -> list[Any]:
    """What a ScriptedModel says for a turn: `rounds` responses calling `lookup`, then `answer`.
    Call ids start with `prefix` ("" gives ids that repeat across turns, as some servers do)."""
    return [
        ModelResponse(
            tool_calls=[ToolCall(f"{prefix}call-{r}-{j}", "lookup", {"q": topic}) for j in range(n)]
        )
        for r, n in enumerate([1, 2, 3][:rounds])
    ] + [answer]


def loop_messages(script: list[Any]) -> list[Message]:
    """The assistant calls and tool results a tool loop adds to the prompt (what `lookup` answers)."""
    out: list[Message] = []
    for response in script:
        if isinstance(response, ModelResponse) and response.tool_calls:
            calls = [ToolCallPart(c.id, c.name, c.args) for c in response.tool_calls]
            out.append(Message.create("assistant", calls))
            results = [
                ToolResultPart(c.id, c.name, f"facts about the {c.args['q']}") for c in response.tool_calls
            ]
            out.append(Message.create("tool", results))
    return out


recall_options = st.one_of(
    st.just(False),
    st.fixed_dictionaries(
        {
            "top_k": st.integers(1, 4),
            "message_range": st.integers(0, 2),
            "scope": st.sampled_from(["thread", "thread", "resource"]),
        }
    ),
)
_examples = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(thread=threads(max_turns=5), data=st.data())
def test_every_model_request_is_valid_for_any_memory_configuration(make_agent, committing, thread, data):
    """A stored thread with tool turns (and maybe an earlier real tool turn), then a turn with a random
    Memory (window 1..8, recall or none) and a random subset of hand-placed MessageHistory,
    SemanticRecall, TokenLimiter and ToolCallFilter in random order, maybe streamed, maybe after an
    echo of the stored tail: every request is valid, the input is all there, and the thread stores
    exactly the turn's new messages."""
    n = next(_examples)
    thread_id, resource_id = f"prop-{n}-{uuid.uuid4().hex[:8]}", f"res-{n}-{uuid.uuid4().hex[:8]}"
    recall = data.draw(recall_options, label="semantic_recall")
    embedder = HashEmbedder(dimensions=64)
    memory = Memory(
        last_messages=data.draw(st.integers(1, 8), label="last_messages"),
        semantic_recall=recall,
        embedder=embedder,
    )
    with committing():
        memory.save_messages(
            [m.replace(id=f"{thread_id}-{m.id}") for m in thread],
            thread_id=thread_id,
            resource_id=resource_id,
        )
        other = [Message.create("user", f"earlier the {t} came up", created_at=BASE) for t in TOPICS[:3]]
        memory.save_messages(other, thread_id=f"{thread_id}-other", resource_id=resource_id)

    if data.draw(st.booleans(), label="an earlier real tool turn"):
        model = ScriptedModel(tool_rounds(f"{thread_id}-w-", "garden", 1, "the garden is green"))
        before = stored_ids(thread_id)
        warm = make_agent(memory=memory, model=model, tools=[lookup])
        texts = ["how is the garden", "and the roses?"][
            : data.draw(st.integers(1, 2), label="earlier inputs")
        ]
        result = warm.generate(texts, thread_id=thread_id, resource_id=resource_id)
        assert_turn(model, result, thread_id=thread_id, before=before)

    topics = [data.draw(st.sampled_from(TOPICS)) for _ in range(data.draw(st.integers(1, 3), label="inputs"))]
    texts = [f"new question {j} about the {topic} please" for j, topic in enumerate(topics)]
    inputs: list[Any] = []
    for j, text in enumerate(texts):
        form = data.draw(st.sampled_from(["str", "dict", "message"]), label=f"input {j} form")
        inputs.append(
            text
            if form == "str"
            else {"role": "user", "content": text}
            if form == "dict"
            else Message.create("user", text, id=f"{thread_id}-in-{j}")
        )
    key = thread_key(resource_id, thread_id)
    echo = data.draw(st.sampled_from(["none", "none", "without ids", "with ids"]), label="echo")
    if echo != "none":  # rules 11 and 17: a client resending the stored tail first
        tail = messages_recent(thread_key=key, limit=data.draw(st.integers(1, 4), label="echoed"))
        inputs[:0] = [
            Message.create(m.role, m.parts) if echo == "without ids" else m.replace(created_at=None)
            for m in tail
        ]
    system_input = data.draw(st.booleans(), label="system input")
    if system_input:  # rule 18: used for this turn, never saved
        inputs.insert(data.draw(st.integers(0, len(inputs))), {"role": "system", "content": "Be brief."})

    counter = get_token_counter()
    instructions = Message.create("system", INSTRUCTIONS)
    needed = sum(counter.count_message(m) for m in [instructions, *to_messages(inputs)])
    if recall and recall["scope"] == "resource":
        # Other threads' hits arrive as one system message, which TokenLimiter counts as fixed (it
        # aborts rather than trim it): leave room for all of the other thread.
        needed += counter.count_message(cross_thread_message(other))
    names = ["filter", "history", "limiter", *(["recall"] if recall else [])]
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True), label="input_processors")
    rounds = data.draw(st.integers(0, 2), label="tool rounds")
    prefix = f"{thread_id}-" if data.draw(st.booleans()) else ""
    script = tool_rounds(prefix, topics[-1], rounds, "done")
    # TokenLimiter fits every call of the loop: leave room for the calls and results it adds.
    needed += sum(counter.count_message(m) for m in loop_messages(script))
    limit = needed + TokenLimiter.reply_tokens + data.draw(st.integers(0, 150), label="slack")
    if (
        echo != "none"
        and {"limiter", "history"} <= set(chosen)
        and chosen.index("limiter") < chosen.index("history")
    ):
        # Before a hand-placed MessageHistory the limiter takes the echo for input, and pins (counts as
        # input) the stored tool messages that share its call ids: room for them too.
        limit += sum(counter.count_message(m) for m in messages_recent(thread_key=key, limit=100))
    pool: dict[str, Any] = {
        "filter": ToolCallFilter(),
        "history": MessageHistory(last_messages=data.draw(st.integers(0, 8), label="hand-placed window")),
        "limiter": TokenLimiter(limit),
        "recall": SemanticRecall(embedder=embedder, **recall) if recall else None,
    }
    model = ScriptedModel(script)
    agent = make_agent(memory=memory, model=model, tools=[lookup], input_processors=[pool[c] for c in chosen])
    before = stored_ids(thread_id)

    if data.draw(st.booleans(), label="streamed"):
        events = list(agent.stream(inputs, thread_id=thread_id, resource_id=resource_id))
        assert events[-1].type == "finish"
        result = events[-1].result
    else:
        result = agent.generate(inputs, thread_id=thread_id, resource_id=resource_id)

    assert [m.text for m in result.messages if m.role == "user"] == texts
    assert_turn(model, result, thread_id=thread_id, before=before)
    assert len(model.requests) == rounds + 1
    if system_input:
        assert all(("system", "Be brief.") in [(m.role, m.text) for m in r.messages] for r in model.requests)


# --- the regressions ------------------------------------------------------------------------------

T, R = "t1", "user-1"


def test_a_window_starting_at_a_tool_result_sends_no_orphan(make_agent):
    """last_messages=4 over [user, call, result, answer, user, answer]: the window starts at the
    tool result, whose call is outside it; the result is not sent, the rest is, in order."""
    model = ScriptedModel([*tool_rounds("w-", "weather", 1, "it is sunny"), "you are welcome", "rain later"])
    agent = make_agent(memory=Memory(last_messages=4), model=model, tools=[lookup])
    agent.generate("what is the weather", thread_id=T, resource_id=R)
    agent.generate("thanks", thread_id=T, resource_id=R)
    before = stored_ids(T)
    model.requests.clear()

    result = agent.generate("and tomorrow?", thread_id=T, resource_id=R)

    assert [m["role"] for m in result.memory["history"]][0] == "tool"  # the window does start there
    assert_turn(model, result, thread_id=T, before=before)
    (request,) = model.requests
    assert [(m.role, m.text) for m in request.messages] == [
        ("system", INSTRUCTIONS),
        ("assistant", "it is sunny"),
        ("user", "thanks"),
        ("assistant", "you are welcome"),
        ("user", "and tomorrow?"),
    ]


def test_hand_placed_history_with_semantic_recall_has_no_duplicates_and_keeps_time_order(
    make_agent, committing
):
    """Automatic recall runs before a hand-placed MessageHistory, so it recalls messages the window
    loads again: the prompt holds each once, in time order, tool pairs whole."""
    memory = Memory(
        last_messages=10,
        semantic_recall={"top_k": 4, "message_range": 1, "scope": "thread"},
        embedder=HashEmbedder(dimensions=64),
    )
    clock = (BASE.replace(minute=i) for i in itertools.count())
    thread = [
        Message.create(role, parts, created_at=next(clock))
        for role, parts in [
            ("user", "my puppy is named Max"),
            (
                "assistant",
                [TextPart("Let me look up puppy names."), ToolCallPart("c1", "lookup", {"q": "puppy"})],
            ),
            ("tool", [ToolResultPart("c1", "lookup", "puppy names")]),
            ("assistant", "Max is a fine name for a puppy"),
            ("user", "the weather is cold"),
            ("assistant", "wear a coat"),
            ("user", "my puppy Max likes walks"),
            ("assistant", "puppy walks are good for Max"),
        ]
    ]
    with committing():
        memory.save_messages(thread, thread_id=T, resource_id=R)
    model = ScriptedModel(["noted"])
    agent = make_agent(memory=memory, model=model, input_processors=[MessageHistory(last_messages=3)])
    before = stored_ids(T)

    result = agent.generate("tell me about my puppy Max", thread_id=T, resource_id=R)

    recalled = {m["id"] for m in result.memory["recalled"]}
    window = {m["id"] for m in result.memory["history"]}
    assert recalled & window and recalled - window  # overlapping, and more than the window
    assert_turn(model, result, thread_id=T, before=before)
    body = [m for m in model.requests[0].messages if m.role != "system"]
    order = {m.id: i for i, m in enumerate(thread)}
    assert [order[m.id] for m in body[:-1]] == sorted(order[m.id] for m in body[:-1])
    assert set(window) <= {m.id for m in body}
    assert [c.tool_call_id for m in body for c in m.tool_calls] == ["c1"]  # recalled whole, kept whole


def test_a_client_resending_the_conversation_without_ids_duplicates_nothing(make_agent):
    """A client (OpenAI style) resends the whole conversation, tool call included, without ids, plus
    one new message: the prompt holds each earlier message once, and only the new turn is stored."""
    model = ScriptedModel([*tool_rounds("e-", "weather", 1, "it is sunny"), "rain tomorrow"])
    agent = make_agent(model=model, tools=[lookup])
    first = agent.generate("what is the weather", thread_id=T, resource_id=R)
    before = stored_ids(T)
    assert len(before) == 4
    model.requests.clear()
    echoed = [
        {"role": "user", "content": "what is the weather"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "e-call-0-0",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "weather"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "e-call-0-0", "content": "facts about the weather"},
        {"role": "assistant", "content": "it is sunny"},
        {"role": "user", "content": "and tomorrow?"},
    ]

    result = agent.generate(echoed, thread_id=T, resource_id=R)

    assert [(m.role, m.text) for m in result.messages] == [
        ("user", "and tomorrow?"),
        ("assistant", "rain tomorrow"),
    ]
    assert_turn(model, result, thread_id=T, before=before)
    (request,) = model.requests
    texts = [m.text for m in request.messages if m.role == "user"]
    assert texts == ["what is the weather", "and tomorrow?"]
    assert [m.id for m in request.messages if m.role != "system"][:4] == [m.id for m in first.messages]


def test_a_tool_pair_loaded_whole_by_window_and_recall_reaches_the_model(make_agent):
    """A turn's input (here a client-sent tool pair) is stored with one timestamp. A hand-placed
    window that starts at the result, plus automatic recall of the call: both halves are loaded, so
    the pair reaches the model, in stored order (ties in time are broken by the stored sequence)."""
    memory = Memory(
        last_messages=10,
        semantic_recall={"top_k": 1, "message_range": 0, "scope": "thread"},
        embedder=HashEmbedder(dimensions=64),
    )
    model = ScriptedModel(["ok one", "ok two", "ok three"])
    make_agent(memory=memory, model=model).generate(
        [
            {"role": "user", "content": "check the dog"},
            Message.create(
                "assistant", [TextPart("looking up the puppy breed"), ToolCallPart("c1", "lookup", {})]
            ),
            Message.create("tool", [ToolResultPart("c1", "lookup", "a beagle")]),
        ],
        thread_id=T,
        resource_id=R,
    )
    make_agent(memory=memory, model=model).generate("thanks", thread_id=T, resource_id=R)
    agent = make_agent(memory=memory, model=model, input_processors=[MessageHistory(last_messages=4)])

    result = agent.generate("the puppy breed", thread_id=T, resource_id=R)

    assert result.memory["history"][0]["role"] == "tool"  # the window starts at the result...
    assert [m["text"] for m in result.memory["recalled"]] == [
        "looking up the puppy breed"
    ]  # ...recall finds the call
    assert_valid_prompt(model.requests[-1].messages, new_input_ids=[result.messages[0].id])
    body = [(m.role, m.text, [c.tool_call_id for c in m.tool_calls]) for m in model.requests[-1].messages[1:]]
    assert body[:2] == [("assistant", "looking up the puppy breed", ["c1"]), ("tool", "", [])]
