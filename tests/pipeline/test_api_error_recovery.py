"""Issue 38 item 2: `process_api_error(ctx, error)` and ContextOverflowRecovery, through the real
OpenAI SDK against the loopback server answering HTTP 400 `context_length_exceeded` the way the
real API does."""

from __future__ import annotations

import dataclasses

import pytest
from asgiref.sync import async_to_sync
from django.db import connections

from memproc import Memory
from memproc.exceptions import ModelContextLengthError, ModelUnavailableError
from memproc.llm.openai import OpenAIChatModel
from memproc.models import Message as StoredMessage
from memproc.processors import ContextOverflowRecovery
from memproc.testing.openai_replies import prompt_tokens
from memproc.testing.openai_server import OpenAICompatibleServer

pytestmark = pytest.mark.django_db

T, R = "t-overflow", "r-overflow"
LIMIT = 120  # the server's window, in its tokens (words)


@pytest.fixture
def server():
    with OpenAICompatibleServer(api_key="test-key") as srv:
        yield srv


def openai_model(server: OpenAICompatibleServer) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=server.base_url, api_key="test-key", max_retries=0)


def long_text(i: int) -> str:
    return f"Message {i}: " + " ".join(f"word{i}x{k}" for k in range(12))


def fill_history(agent, server: OpenAICompatibleServer, turns: int = 8) -> None:
    """Turns with no window on the server: the thread's history grows past LIMIT."""
    server.context_tokens = None
    for i in range(turns):
        agent.generate(long_text(i), thread_id=T, resource_id=R)
    server.reset()


class AlwaysRetry:
    """Asks for a retry of the same request, whatever went wrong."""

    id = "always-retry"

    def __init__(self) -> None:
        self.seen: list[tuple[int, str, int]] = []

    def process_api_error(self, ctx, error):
        self.seen.append((ctx.step, type(error).__name__, len(ctx.request.messages)))
        return ctx.request


def test_overflow_trims_the_oldest_history_and_the_retried_request_fits(make_agent, server):
    agent = make_agent(
        model=openai_model(server),
        memory=Memory(last_messages=40),
        input_processors=[ContextOverflowRecovery()],
    )
    fill_history(agent, server)
    server.context_tokens = LIMIT

    result = agent.generate("What was the first message?", thread_id=T, resource_id=R)

    assert result.text == "Echo: What was the first message?"
    first, retried = server.requests
    assert prompt_tokens(first) > LIMIT and prompt_tokens(retried) <= LIMIT
    sent, kept = first["messages"], retried["messages"]
    assert kept[0] == sent[0] and kept[0]["role"] == "system"  # the instructions stay
    assert kept[-1] == sent[-1] == {"role": "user", "content": "What was the first message?"}
    assert kept[1:-1] == sent[len(sent) - len(kept) + 1 : -1]  # what is left is the newest history
    assert len(kept) < len(sent)
    assert server.rejected == []
    # Only the request was trimmed: the thread keeps every message, and the turn was saved.
    assert StoredMessage.objects.filter(thread__public_id=T).count() == 2 * 8 + 2


def test_the_provider_error_is_typed_with_its_counts(server):
    server.context_tokens = 3
    from memproc.llm.types import ModelRequest
    from memproc.messages import Message

    with pytest.raises(ModelContextLengthError) as caught:
        openai_model(server).generate(ModelRequest([Message.create("user", "one two three four five")]))
    assert (caught.value.limit, caught.value.requested) == (3, 5)
    assert caught.value.code == "model_context_length"
    assert "one two" not in caught.value.public_message


def test_a_server_that_copies_openais_message_without_the_code_counts_too(server):
    from memproc.llm.types import ModelRequest
    from memproc.messages import Message

    server.enqueue(
        {
            "status": 400,
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 "
            "tokens (4000 in the messages, 1000 in the completion). Please reduce the length.",
        }
    )
    with pytest.raises(ModelContextLengthError) as caught:
        openai_model(server).generate(ModelRequest([Message.create("user", "hi")]))
    assert (caught.value.limit, caught.value.requested) == (4096, 4000)


def test_a_tool_loop_after_an_overflow_leaves_the_dropped_history_out(make_agent, server):
    from memproc import tool

    @tool
    def lookup(city: str) -> dict:
        """Looks a city up."""
        return {"city": city}

    agent = make_agent(
        model=openai_model(server),
        memory=Memory(last_messages=40),
        tools=[lookup],
        input_processors=[ContextOverflowRecovery()],
    )
    fill_history(agent, server)
    server.context_tokens = LIMIT
    server.enqueue({"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}]})
    server.enqueue("Done.")

    result = agent.generate("Look up Oslo.", thread_id=T, resource_id=R)

    assert result.text == "Done."
    # The first call failed and was retried trimmed; the second step was sent trimmed at once.
    assert [prompt_tokens(r) <= LIMIT for r in server.requests] == [False, True, True]


@pytest.mark.parametrize("driver", ["stream", "agenerate", "astream"])
@pytest.mark.django_db(transaction=True)
def test_recovery_under_every_driver(make_agent, server, driver):
    agent = make_agent(
        model=openai_model(server),
        memory=Memory(last_messages=40),
        input_processors=[ContextOverflowRecovery()],
    )
    fill_history(agent, server)
    server.context_tokens = LIMIT
    text = "And now?"
    try:
        if driver == "stream":
            events = list(agent.stream(text, thread_id=T, resource_id=R))
        elif driver == "agenerate":
            events = [async_to_sync(agent.agenerate)(text, thread_id=T, resource_id=R)]
        else:

            async def collect():
                return [e async for e in agent.astream(text, thread_id=T, resource_id=R)]

            events = async_to_sync(collect)()
    finally:
        connections.close_all()
    result = events[-1] if driver == "agenerate" else events[-1].result
    assert result.text == "Echo: And now?"
    if driver != "agenerate":
        assert "retry" not in [e.type for e in events]  # nothing of the failed call was streamed
    assert [prompt_tokens(r) <= LIMIT for r in server.requests] == [False, True]


def test_a_server_that_always_refuses_ends_the_turn_after_the_retry_bound(make_agent, server):
    server.context_tokens = 1
    always = AlwaysRetry()
    agent = make_agent(model=openai_model(server), input_processors=[always])

    with pytest.raises(ModelContextLengthError) as caught:
        agent.generate("Hello there", thread_id=T, resource_id=R)

    assert len(server.requests) == 1 + 3  # the first call and the default 3 retries, then it stops
    assert len(always.seen) == 3
    assert any("no retry left" in note for note in caught.value.__notes__)
    assert StoredMessage.objects.count() == 0


def test_the_bound_is_max_processor_retries_when_set(make_agent, server):
    server.context_tokens = 1
    agent = make_agent(model=openai_model(server), input_processors=[AlwaysRetry()], max_processor_retries=1)
    with pytest.raises(ModelContextLengthError):
        agent.generate("Hello there", thread_id=T, resource_id=R)
    assert len(server.requests) == 2
    server.reset()
    with pytest.raises(ModelContextLengthError):
        agent.generate("Hello there", thread_id=T, resource_id=R, max_processor_retries=0)
    assert len(server.requests) == 1


def test_recovery_with_nothing_left_to_drop_lets_the_error_stand(make_agent, server):
    agent = make_agent(
        model=openai_model(server),
        memory=Memory(last_messages=40),
        input_processors=[ContextOverflowRecovery()],
    )
    fill_history(agent, server, turns=3)
    server.context_tokens = 5  # not even the new input fits

    with pytest.raises(ModelContextLengthError):
        agent.generate(long_text(99), thread_id=T, resource_id=R)

    assert 2 <= len(server.requests) <= 4  # trimmed until no history was left, then it stopped
    assert StoredMessage.objects.filter(thread__public_id=T).count() == 2 * 3  # nothing of the turn


def test_other_errors_and_a_hook_that_returns_none_let_the_error_stand(make_agent, server):
    server.enqueue({"status": 503, "message": "overloaded"})
    agent = make_agent(model=openai_model(server), input_processors=[ContextOverflowRecovery()])
    with pytest.raises(ModelUnavailableError):
        agent.generate("Hello", thread_id=T, resource_id=R)
    assert len(server.requests) == 1


def test_a_transient_error_is_retried_by_a_hook_that_asks(make_agent, server):
    server.enqueue({"status": 503, "message": "overloaded"})
    always = AlwaysRetry()
    agent = make_agent(model=openai_model(server), input_processors=[always])
    result = agent.generate("Hello", thread_id=T, resource_id=R)
    assert result.text == "Echo: Hello"
    assert always.seen == [(0, "ModelUnavailableError", 2)]


def test_hooks_run_in_order_each_seeing_the_request_the_one_before_returned(make_agent, server):
    server.enqueue({"status": 503, "message": "overloaded"})
    seen: list[int] = []

    class DropSystem:
        id = "drop-system"

        def process_api_error(self, ctx, error):
            return dataclasses.replace(ctx.request, messages=list(ctx.messages))

    class Count:
        id = "count"

        def process_api_error(self, ctx, error):
            seen.append(len(ctx.request.messages))
            return None

    agent = make_agent(
        model=openai_model(server), input_processors=[DropSystem()], output_processors=[Count()]
    )
    agent.generate("Hello", thread_id=T, resource_id=R)
    assert seen == [1]  # the instructions were dropped by the first hook
    assert [m["role"] for m in server.requests[-1]["messages"]] == ["user"]


def test_an_error_after_the_stream_passed_text_on_is_not_retried(make_agent, server):
    server.enqueue({"content": "one two three four five", "disconnect_after": 3})
    always = AlwaysRetry()
    agent = make_agent(model=openai_model(server), input_processors=[always])
    with pytest.raises(ModelUnavailableError):  # the adapter's error for a cut stream
        list(agent.stream("Hello", thread_id=T, resource_id=R))
    assert always.seen == [] and len(server.requests) == 1


def test_an_abort_in_process_api_error_is_an_error(make_agent, server):
    server.enqueue({"status": 503, "message": "overloaded"})

    class Aborts:
        id = "aborts"

        def process_api_error(self, ctx, error):
            ctx.abort("no")

    agent = make_agent(model=openai_model(server), input_processors=[Aborts()])
    with pytest.raises(TypeError, match="cannot block a turn"):
        agent.generate("Hello", thread_id=T, resource_id=R)


def test_a_parallel_members_process_api_error_runs_and_a_custom_model_can_raise_model_errors(make_agent):
    from memproc.llm.types import ModelResponse
    from memproc.processors import Parallel

    class FlakyModel:
        """A model of one's own: fails once with memproc's error for a transient failure."""

        id = "test/flaky"

        def __init__(self) -> None:
            self.calls = 0

        def generate(self, request):
            self.calls += 1
            if self.calls == 1:
                raise ModelUnavailableError("down for a moment")
            return ModelResponse(text="Back.")

    class Judge:
        id = "judge"

        def process_input(self, ctx):
            return None

    always = AlwaysRetry()
    model = FlakyModel()
    agent = make_agent(model=model, input_processors=[Parallel(Judge(), always)])
    result = agent.generate("Hello", thread_id=T, resource_id=R)
    assert result.text == "Back." and model.calls == 2
    assert always.seen == [(0, "ModelUnavailableError", 2)]
