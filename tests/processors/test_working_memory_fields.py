"""Working memory by field (the memory view): fields of Markdown and JSON memories, setting one, and
the pins the model's update tool keeps; recall exclusion on the in-memory store. No database."""

from __future__ import annotations

import json

import pytest

from memproc.exceptions import ValidationError
from memproc.messages import Message
from memproc.processors.base import ProcessorContext
from memproc.processors.semantic_recall import SemanticRecall
from memproc.processors.store import InMemoryStore
from memproc.processors.turn import Turn
from memproc.processors.working_memory import DEFAULT_TEMPLATE, WorkingMemory
from memproc.processors.working_memory_fields import field_set, fields_of, keep_pinned
from memproc.testing import HashEmbedder
from memproc.tools import ToolContext

R = "r-fields"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def test_markdown_fields_follow_the_template_then_the_text():
    text = DEFAULT_TEMPLATE.replace("- **First Name**:", "- **First Name**: Ada") + "\n- **Pet**: a cat"
    fields = {f.name: f.value for f in fields_of(text=text, mode="markdown", template=DEFAULT_TEMPLATE)}
    assert list(fields)[:2] == ["First Name", "Last Name"] and list(fields)[-1] == "Pet"
    assert fields["First Name"] == "Ada" and fields["Last Name"] == "" and fields["Pet"] == "a cat"


def test_markdown_continuation_lines_belong_to_their_field():
    text = "# Me\n- **Interests**: many\n  - hiking\n  - chess\n- **Goals**: rest"
    fields = {f.name: f.value for f in fields_of(text=text, mode="markdown")}
    assert fields == {"Interests": "many\n- hiking\n- chess", "Goals": "rest"}


def test_setting_a_markdown_field_changes_only_its_line_and_starts_from_the_template():
    new = field_set(current="", name="Location", value="Oslo", mode="markdown", template=DEFAULT_TEMPLATE)
    assert new == DEFAULT_TEMPLATE.replace("- **Location**:", "- **Location**: Oslo")
    again = field_set(current=new, name="Location", value="Bergen\n- **Goals**: hacked", mode="markdown")
    fields = {f.name: f.value for f in fields_of(text=again, mode="markdown")}
    assert fields["Location"] == "Bergen\n- **Goals**: hacked" and fields["Goals"] == ""  # no new field line


def test_setting_an_unknown_field_or_a_bad_value_is_refused():
    with pytest.raises(ValidationError):
        field_set(current="", name="Nope", value="x", mode="markdown", template=DEFAULT_TEMPLATE)
    with pytest.raises(ValidationError):
        field_set(current="", name="Location", value=3, mode="markdown", template=DEFAULT_TEMPLATE)
    with pytest.raises(ValidationError):
        field_set(current="{}", name="age", value="old", mode="schema", schema=SCHEMA)


def test_setting_a_json_field_merges_and_null_removes_it():
    new = field_set(current='{"name": "Ada"}', name="age", value=36, mode="schema", schema=SCHEMA)
    assert json.loads(new) == {"name": "Ada", "age": 36}
    assert json.loads(field_set(current=new, name="name", value=None, mode="schema", schema=SCHEMA)) == {
        "age": 36
    }


def test_keep_pinned_restores_pinned_fields_and_names_them():
    current = "- **Name**: Ada\n- **City**: Oslo"
    new, kept = keep_pinned(
        current=current, new="- **Name**: Bob\n- **City**: Rome", pinned=["Name"], mode="markdown"
    )
    assert new == "- **Name**: Ada\n- **City**: Rome" and kept == ["Name"]
    new, kept = keep_pinned(
        current='{"a": 1, "b": 2}', new='{"b": 3, "c": 4}', pinned=["a", "c"], mode="schema"
    )
    assert json.loads(new) == {"a": 1, "b": 3} and kept == ["a", "c"]
    assert (
        keep_pinned(current=current, new=current + "\n- **X**: y", pinned=["Name"], mode="markdown")[1] == []
    )


def test_the_update_tool_keeps_a_pinned_field_and_tells_the_model():
    store = InMemoryStore(
        working_memory={("resource", R): "- **Name**: Ada\n- **City**: Oslo"}, pinned={R: ("Name",)}
    )
    turn = Turn(agent=None, thread_id="t", resource_id=R, store=store, input_messages=[])
    processor = WorkingMemory(template="- **Name**:\n- **City**:")
    ctx = ProcessorContext(
        processor_id=processor.id,
        messages=(Message.create("user", "hi"),),
        turn=turn,
        thread_id="t",
        resource_id=R,
        store=store,
    )
    out = processor.process_input(ctx)
    assert "keep them as they are: Name" in out[-1].text
    result = turn.tools["updateWorkingMemory"].execute(
        memory="- **Name**: Bob\n- **City**: Rome",
        context=ToolContext(thread_id="t", resource_id=R, agent=None, turn=turn),
    )
    assert result["pinned"] == ["Name"] and "Name" in result["note"]
    assert turn.info.working_memory == "- **Name**: Ada\n- **City**: Rome"
    assert turn.writes.working_memory[0].pinned == ("Name",)


def test_recall_leaves_excluded_messages_out_on_the_in_memory_store():
    embedder = HashEmbedder(dimensions=32)
    store = InMemoryStore()
    first = Message.create("user", "my cat is called Tom").replace(resource_id=R)
    second = Message.create("user", "my dog is called Rex").replace(resource_id=R)
    store.add("old", [first, second], embedder=embedder)
    recall = SemanticRecall(embedder=embedder, top_k=2, message_range=1)

    def recalled() -> list[str]:
        ctx = ProcessorContext(
            processor_id=recall.id,
            messages=(Message.create("user", "my cat?"),),
            thread_id="new",
            resource_id=R,
            store=store,
        )
        same, other = recall.recall(ctx, "my cat?") or ([], [])
        return [m.text for m in [*same, *other]]

    assert recalled() == ["my cat is called Tom", "my dog is called Rex"]
    store.recall_excluded.add(first.id)
    assert recalled() == ["my dog is called Rex"]  # neither a hit nor a neighbour
