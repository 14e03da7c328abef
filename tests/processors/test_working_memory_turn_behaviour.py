"""WorkingMemory in a turn: which memory it reads (scope, key, resource, a new thread), what the turn
records of the read, what an update through the tool checks (template guard, schema, pins, size) and
records for the save. In-memory store, no database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from memproc.exceptions import ToolError, ValidationError
from memproc.messages import Message
from memproc.processors.base import ProcessorContext
from memproc.processors.store import InMemoryStore, WorkingMemoryValue
from memproc.processors.tokens import get_token_counter
from memproc.processors.turn import Turn
from memproc.processors.turn_info import WorkingMemoryRead
from memproc.processors.working_memory import TOOL_NAME, WorkingMemory, check_size
from memproc.tools import ToolContext

T, R = "t-wm", "r-wm"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}


class RecordingStore(InMemoryStore):
    def working_memory_get(self, **kwargs: Any) -> WorkingMemoryValue:
        self.asked = kwargs
        return super().working_memory_get(**kwargs)


def run(
    memory: WorkingMemory,
    store: Any,
    *,
    thread_id: str | None = T,
    resource_id: str | None = R,
    exists: bool = True,
) -> tuple[list[Message] | None, Turn]:
    turn = Turn(
        agent=None,
        thread_id=thread_id,
        resource_id=resource_id,
        store=store,
        input_messages=[],
        thread_exists=exists,
    )
    ctx = ProcessorContext(
        processor_id=memory.id,
        messages=(Message.create("user", "hi"),),
        thread_id=thread_id,
        resource_id=resource_id,
        store=store,
        turn=turn,
    )
    return memory.process_input(ctx), turn


def update(turn: Turn, memory: Any) -> dict[str, Any]:
    context = ToolContext(thread_id=turn.thread_id, resource_id=turn.resource_id, agent=None, turn=turn)
    return turn.tools[TOOL_NAME].execute(memory=memory, context=context)


def data_of(message: Message) -> str:
    return message.text.rsplit("<working_memory>\n", 1)[1].removesuffix("\n</working_memory>")


def test_resource_scope_reads_the_resources_memory_and_records_the_read():
    store = RecordingStore(working_memory={("resource", R): "# Me\n- likes tea"})
    out, turn = run(WorkingMemory(), store)
    assert out[0].text == "hi" and data_of(out[-1]) == "# Me\n- likes tea"
    assert store.asked == {"scope": "resource", "key": R, "resource_id": R}
    assert turn.info.working_memory == "# Me\n- likes tea"
    assert turn.info.working_memory_version == WorkingMemoryRead("resource", R, 1)
    assert list(turn.tools) == [TOOL_NAME]


def test_thread_scope_reads_the_threads_memory_of_the_resource():
    store = RecordingStore(working_memory={("thread", T): "thread notes", ("resource", R): "not this"})
    out, turn = run(WorkingMemory(scope="thread", template="# Notes"), store)
    assert data_of(out[-1]) == "thread notes"
    assert store.asked == {"scope": "thread", "key": T, "resource_id": R}
    assert turn.info.working_memory_version == WorkingMemoryRead("thread", T, 1)


def test_a_new_thread_has_an_empty_thread_memory_without_a_read():
    store = RecordingStore(working_memory={("thread", T): "stale"})
    out, turn = run(WorkingMemory(scope="thread", template="# Notes"), store, exists=False)
    assert not hasattr(store, "asked")
    assert data_of(out[-1]) == "# Notes"
    assert turn.info.working_memory == ""
    assert turn.info.working_memory_version == WorkingMemoryRead("thread", T, 0)


def test_a_new_thread_still_reads_the_resources_memory():
    store = InMemoryStore(working_memory={("resource", R): "kept"})
    out, turn = run(WorkingMemory(), store, exists=False)
    assert data_of(out[-1]) == "kept" and turn.info.working_memory_version == WorkingMemoryRead(
        "resource", R, 1
    )


@pytest.mark.parametrize(
    ("scope", "thread_id", "resource_id"), [("resource", T, None), ("thread", None, R), ("resource", T, "")]
)
def test_without_a_key_nothing_is_read_or_offered(scope, thread_id, resource_id):
    store = RecordingStore()
    out, turn = run(WorkingMemory(scope=scope), store, thread_id=thread_id, resource_id=resource_id)
    assert out is None and turn.tools == {} and turn.info.working_memory_version is None
    assert not hasattr(store, "asked")


def test_without_a_store_or_a_turn_nothing_happens():
    out, turn = run(WorkingMemory(), None)
    assert out is None and turn.tools == {} and turn.info.working_memory_version is None
    ctx = ProcessorContext(processor_id="wm", messages=(), thread_id=T, resource_id=R, store=InMemoryStore())
    assert WorkingMemory().process_input(ctx) is None


@dataclass
class OldValue:
    """A store's value from before pins: no `pinned`."""

    text: str
    version: int


class OldStore(InMemoryStore):
    def working_memory_get(self, **kwargs: Any) -> OldValue:
        return OldValue("- **Name**: Ada", 7)


def test_a_store_without_pins_reads_as_none_pinned():
    out, turn = run(WorkingMemory(template="- **Name**:"), OldStore())
    assert "keep them as they are" not in out[-1].text
    assert turn.info.working_memory_version == WorkingMemoryRead("resource", R, 7)
    assert update(turn, "- **Name**: Bob") == {"success": True}
    assert turn.writes.working_memory[0].pinned == ()


def test_an_update_records_the_read_it_started_from_and_its_key():
    store = InMemoryStore(working_memory={("thread", T): "old"})
    _, turn = run(WorkingMemory(scope="thread", template="# Notes"), store)
    assert update(turn, "new") == {"success": True}
    assert update(turn, "newer") == {"success": True}
    first, second = turn.writes.working_memory
    assert (first.scope, first.key, first.value, first.expected) == ("thread", T, "new", ("old", 1))
    assert (second.key, second.value, second.expected) == (T, "newer", None)  # read once, checked once
    assert turn.info.working_memory == "newer"


def test_a_first_update_of_a_new_thread_expects_version_zero():
    _, turn = run(WorkingMemory(scope="thread", template="# Notes"), InMemoryStore(), exists=False)
    update(turn, "notes")
    assert turn.writes.working_memory[0].expected == ("", 0)


def test_read_only_offers_no_tool_but_still_shows_the_memory():
    out, turn = run(WorkingMemory(read_only=True), InMemoryStore(working_memory={("resource", R): "m"}))
    assert turn.tools == {} and data_of(out[-1]) == "m" and turn.info.working_memory == "m"


def test_an_update_to_the_empty_template_cannot_erase_the_memory():
    template = "# User\n- **Name**:"
    _, turn = run(
        WorkingMemory(template=template),
        InMemoryStore(working_memory={("resource", R): "# User\n- **Name**: Ada"}),
    )
    with pytest.raises(ToolError) as raised:
        update(turn, template)
    assert str(raised.value) == (
        "Refused: the update equals the empty template and would erase the existing working memory"
    )
    assert turn.writes.working_memory == [] and turn.info.working_memory == "# User\n- **Name**: Ada"


def test_a_schema_update_merges_into_what_was_read_and_is_checked():
    store = InMemoryStore(working_memory={("resource", R): '{"name": "Ada"}'})
    _, turn = run(WorkingMemory(schema=SCHEMA), store)
    with pytest.raises(ToolError) as raised:
        update(turn, {"city": 3})
    assert str(raised.value) == "Working memory does not match the schema at city: 3 is not of type 'string'"
    assert update(turn, {"city": "Oslo"}) == {"success": True}
    assert json.loads(turn.info.working_memory) == {"name": "Ada", "city": "Oslo"}
    assert turn.writes.working_memory[0].value == {"city": "Oslo"}


def test_with_nothing_read_an_update_starts_from_the_empty_memory():
    template = "- **A**: fixed\n- **B**:"
    memory = WorkingMemory(template=template)
    context = ToolContext(thread_id=T, resource_id=R, agent=None, turn=None)
    first: dict[str, Any] = {}
    assert memory.update_tool(first, R).execute(memory=template, context=context) == {"success": True}
    pinned: dict[str, Any] = {"pinned": ("A",)}  # the template's value of a pinned field is kept
    answer = memory.update_tool(pinned, R).execute(memory="- **A**: other\n- **B**: 2", context=context)
    assert answer["pinned"] == ["A"] and pinned["current"] == "- **A**: fixed\n- **B**: 2"


def test_an_update_without_a_read_records_no_expectation():
    memory = WorkingMemory(schema=SCHEMA)
    turn = Turn(agent=None, thread_id=T, resource_id=R, store=None, input_messages=[])
    state: dict[str, Any] = {"current": "{}"}
    answer = memory.update_tool(state, R).execute(
        memory={"name": "Ada"}, context=ToolContext(thread_id=T, resource_id=R, agent=None, turn=turn)
    )
    assert answer == {"success": True}
    assert turn.writes.working_memory[0].expected is None and turn.writes.working_memory[0].pinned == ()


def test_a_memory_up_to_the_character_cap_is_accepted(settings):
    settings.MEMPROC = {"MAX_WORKING_MEMORY_CHARS": 10}
    check_size("x" * 10, max_tokens=None)
    with pytest.raises(ValidationError) as raised:
        check_size("x" * 11, max_tokens=None)
    assert (
        str(raised.value)
        == "working memory is limited to 10 characters; rewrite it shorter (this one has 11)"
    )


def test_the_character_cap_is_refused_through_the_tool(settings):
    settings.MEMPROC = {"MAX_WORKING_MEMORY_CHARS": 5}
    _, turn = run(WorkingMemory(template=""), InMemoryStore())
    with pytest.raises(ToolError) as raised:
        update(turn, "123456")
    assert (
        str(raised.value) == "working memory is limited to 5 characters; rewrite it shorter (this one has 6)"
    )
    assert update(turn, "12345") == {"success": True}


def test_a_memory_of_exactly_max_tokens_is_accepted():
    text = "one two three four five"
    tokens = get_token_counter().count_text(text)
    check_size(text, max_tokens=tokens)
    with pytest.raises(ValidationError) as raised:
        check_size(text, max_tokens=tokens - 1)
    assert str(raised.value) == (
        f"working memory is limited to {tokens - 1} tokens; rewrite it shorter (this one has {tokens})"
    )
