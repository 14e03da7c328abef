"""MessageHistory, translated from Mastra's suite, plus rule 11 (echoed history) and query counts."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memproc import Memory
from memproc.exceptions import MessageConflict
from memproc.llm.types import ModelResponse, ToolCall
from memproc.models import Message as StoredMessage
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db
T, R = "t1", "user-1"


def prompt_texts(model: ScriptedModel, call: int = -1) -> list[str]:
    return [m.text for m in model.requests[call].messages if m.role != "system"]


def test_last_n_window_in_order_before_the_new_input(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=4))
    for i in range(4):
        model.add(f"a{i}")
        agent.generate(f"u{i}", thread_id=T, resource_id=R)
    assert prompt_texts(model) == ["u1", "a1", "u2", "a2", "u3"]


def test_history_is_per_thread(make_agent, model):
    agent = make_agent()
    model.add("a", "b")
    agent.generate("in thread one", thread_id="one", resource_id=R)
    agent.generate("in thread two", thread_id="two", resource_id=R)
    assert prompt_texts(model) == ["in thread two"]


def test_echoed_history_is_not_duplicated_or_saved_again(make_agent, model):
    agent = make_agent()
    model.add("first answer", "second answer")
    first = agent.generate("first", thread_id=T, resource_id=R)
    echoed = [{"id": m.id, "role": m.role, "content": m.text} for m in first.messages]
    agent.generate([*echoed, {"role": "user", "content": "second"}], thread_id=T, resource_id=R)
    assert prompt_texts(model) == ["first", "first answer", "second"]
    assert list(StoredMessage.objects.order_by("sequence").values_list("text", flat=True)) == [
        "first",
        "first answer",
        "second",
        "second answer",
    ]


def test_echoed_copy_with_changed_text_loses_to_the_stored_copy(make_agent, model):
    agent = make_agent()
    model.add("ok", "ok2")
    first = agent.generate("original", thread_id=T, resource_id=R)
    user_id = first.messages[0].id
    agent.generate(
        [{"id": user_id, "role": "user", "content": "tampered"}, "next"], thread_id=T, resource_id=R
    )
    assert "tampered" not in prompt_texts(model) and "original" in prompt_texts(model)


def test_an_id_stored_in_another_of_ones_threads_is_a_conflict_and_nothing_is_saved(make_agent, model):
    """The API answers 409 before the turn; a Python turn raises the same MessageConflict."""
    agent = make_agent()
    model.add("a", "b")
    other = agent.generate("elsewhere", thread_id="other", resource_id=R)
    reused = other.messages[0].id
    with pytest.raises(MessageConflict, match=reused):
        agent.generate(
            [{"id": reused, "role": "user", "content": "mine"}, "more"], thread_id=T, resource_id=R
        )
    assert model.calls == 1  # the model was never asked
    assert not StoredMessage.objects.filter(thread__public_id=T).exists()
    assert StoredMessage.objects.get(resource_id=R, public_id=reused).text == "elsewhere"


def test_an_id_another_resource_stored_is_free(make_agent, model):
    agent = make_agent()
    model.add("a", "b")
    theirs = agent.generate("elsewhere", thread_id="other", resource_id="someone-else")
    taken = theirs.messages[0].id
    agent.generate([{"id": taken, "role": "user", "content": "mine"}], thread_id=T, resource_id=R)
    mine = StoredMessage.objects.get(thread__public_id=T, role="user")
    assert (mine.public_id, mine.text) == (taken, "mine")
    assert StoredMessage.objects.get(resource_id="someone-else", public_id=taken).text == "elsewhere"


def test_working_memory_tool_calls_are_never_saved(make_agent, model):
    agent = make_agent(memory=Memory(working_memory=True))
    model.add(
        ModelResponse(tool_calls=[ToolCall("c1", "updateWorkingMemory", {"memory": "# User\n- Name: Ada"})]),
        "Nice to meet you, Ada.",
    )
    result = agent.generate("I am Ada", thread_id=T, resource_id=R)
    assert [m.role for m in result.messages] == ["user", "assistant"]
    rows = list(StoredMessage.objects.values_list("role", "text"))
    assert rows == [("user", "I am Ada"), ("assistant", "Nice to meet you, Ada.")]
    assert "updateWorkingMemory" not in str(list(StoredMessage.objects.values_list("content", flat=True)))


def test_partial_tool_calls_are_not_saved(make_agent, model):
    from memproc import tool

    @tool
    def lookup(q: str) -> str:
        return "found"

    model.add(
        *[
            ModelResponse(text="thinking", tool_calls=[ToolCall(f"c{i}", "lookup", {"q": "x"})])
            for i in range(2)
        ]
    )
    make_agent(tools=[lookup], max_steps=2).generate("go", thread_id=T, resource_id=R)
    # Both calls got results (the loop runs tools before stopping), so both pairs are saved whole.
    roles = list(StoredMessage.objects.order_by("sequence").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "tool"]


@pytest.mark.parametrize("stored_messages", [10, 1000])
def test_turn_query_count_is_fixed_whatever_the_history_length(
    make_agent, model, committing, stored_messages
):
    from memproc.messages import Message

    memory = Memory(last_messages=10, semantic_recall={"top_k": 3, "message_range": 2}, working_memory=True)
    agent = make_agent(memory=memory)
    memory.create_thread(resource_id=R, thread_id=T)
    with committing():
        memory.save_messages(
            [
                Message.create("user" if i % 2 == 0 else "assistant", f"stored message {i}")
                for i in range(stored_messages)
            ],
            thread_id=T,
            resource_id=R,
        )
    model.add("warm", "answer")
    agent.generate("warm up", thread_id=T, resource_id=R)
    with CaptureQueriesContext(connection) as queries:
        agent.generate("stored message about things", thread_id=T, resource_id=R)
    # the thread, working memory, the history window, vector search, the hits' positions, their
    # ranges; savepoint, sequence update, its read, message insert, turn record insert, release
    # (BEGIN/COMMIT outside tests); after commit: embedding lookup by content hash, embedding insert
    assert len(queries) <= 14, "\n".join(q["sql"][:120] for q in queries)


def test_turn_records_off_saves_the_insert(make_agent, model, settings):
    settings.MEMPROC = {**settings.MEMPROC, "RECORD_TURNS": False}
    agent = make_agent()
    model.add("one", "two")
    agent.generate("first", thread_id=T, resource_id=R)
    with CaptureQueriesContext(connection) as queries:
        agent.generate("second", thread_id=T, resource_id=R)
    assert not any("memproc_turnrecord" in q["sql"] for q in queries)


def test_window_is_full_after_messages_were_deleted(make_agent, model):
    agent = make_agent(memory=Memory(last_messages=4))
    for i in range(4):
        model.add(f"a{i}")
        agent.generate(f"u{i}", thread_id=T, resource_id=R)
    agent.memory.delete_messages(
        list(StoredMessage.objects.filter(text__in=["a3", "u2"]).values_list("public_id", flat=True))
    )
    model.add("a4")
    agent.generate("u4", thread_id=T, resource_id=R)
    # The range below the last sequence came back short: the plain newest-first query filled it.
    assert prompt_texts(model) == ["u1", "a1", "a2", "u3", "u4"]
