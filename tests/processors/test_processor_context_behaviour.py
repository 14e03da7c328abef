"""What a processor gets from `ProcessorContext` and `Turn` (aborting, marking what memory loaded,
its new messages, the turn's tools), how `processor_id` refuses what is not a processor, and how
hooks are called: sync, `async def`, or sync returning an awaitable."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from memproc.exceptions import TripWire
from memproc.processors.base import HOOKS, Processor, ProcessorContext, processor_id
from memproc.processors.hooks import call_hook, is_async_hook
from memproc.processors.turn import Turn
from memproc.tools import Tool
from tests.processors.conftest import assistant, make_ctx, user


def a_turn() -> Turn:
    return Turn(agent=None, thread_id="t1", resource_id="r1", store=None, input_messages=[])


def a_tool(name: str, *, internal: bool = False) -> Tool:
    return Tool(name, "does things", {"type": "object", "properties": {}}, lambda: "ok", internal=internal)


# --- processor_id -----------------------------------------------------------------------------------


class WithId:
    def __init__(self, id: Any) -> None:
        self.id = id

    def __repr__(self) -> str:
        return f"<WithId {self.id!r}>"


def test_a_processor_is_known_by_its_non_empty_string_id():
    assert processor_id(WithId("guard")) == "guard"
    assert isinstance(WithId("guard"), Processor)


@pytest.mark.parametrize(
    ("thing", "shown"),
    [
        (WithId(""), "<WithId ''>"),
        (WithId(3), "<WithId 3>"),
        (WithId(None), "<WithId None>"),
        ("guard", "'guard'"),
    ],
)
def test_anything_without_one_is_not_a_processor(thing, shown):
    with pytest.raises(TypeError) as raised:
        processor_id(thing)
    assert str(raised.value) == f"{shown} is not a processor: it needs a non-empty string `id`"


def test_each_hook_reports_its_own_phase():
    assert HOOKS == {
        "process_input": "input",
        "process_input_step": "input_step",
        "process_output_step": "output_step",
        "process_tool_result": "tool_result",
        "process_output_result": "output",
        "process_output_stream": "stream",
        "process_api_error": "api_error",
    }


# --- the context ------------------------------------------------------------------------------------


def test_abort_raises_a_tripwire_naming_the_processor():
    ctx = make_ctx(processor_id="guard")
    with pytest.raises(TripWire) as raised:
        ctx.abort("too rude", retry=True, metadata={"score": 0.9})
    error = raised.value
    assert (error.reason, error.processor_id, error.retry, error.metadata) == (
        "too rude",
        "guard",
        True,
        {"score": 0.9},
    )
    with pytest.raises(TripWire) as raised:
        ctx.abort()
    error = raised.value
    assert (error.reason, error.processor_id, error.retry, error.metadata) == (
        "Tripwire triggered by guard",
        "guard",
        False,
        {},
    )
    with pytest.raises(TripWire) as raised:
        ctx.abort("")
    assert raised.value.reason == "Tripwire triggered by guard"


def test_new_messages_are_those_memory_did_not_load():
    old, new = assistant("earlier", id="h1"), user("now", id="n1")
    ctx = make_ctx(history=[old], new=[new])
    assert [m.id for m in ctx.new_messages] == ["n1"]


def test_mark_loaded_adds_to_what_memory_loaded_here_and_on_the_turn():
    old, recalled, new = assistant("earlier", id="h1"), user("long ago", id="r1"), user("now", id="n1")
    turn = a_turn()
    turn.loaded_ids.add("h1")
    ctx = ProcessorContext(
        processor_id="recall", messages=(old, recalled, new), loaded_ids=frozenset({"h1"}), turn=turn
    )
    ctx.mark_loaded([recalled])
    assert ctx.loaded_ids == frozenset({"h1", "r1"})
    assert turn.loaded_ids == {"h1", "r1"}
    assert [m.id for m in ctx.new_messages] == ["n1"]
    # Outside a turn, only the context knows.
    bare = make_ctx(history=[old], new=[recalled, new])
    bare.mark_loaded([recalled])
    assert bare.loaded_ids == frozenset({"h1", "r1"})


def test_turn_tools_by_name_and_the_internal_ones():
    turn = a_turn()
    search, memory, replaced = a_tool("search"), a_tool("update_memory", internal=True), a_tool("search")
    turn.add_tool(search)
    turn.add_tool(memory)
    assert turn.tools == {"search": search, "update_memory": memory}
    assert turn.internal_tool_names == {"update_memory"}
    turn.add_tool(replaced)
    assert turn.tools["search"] is replaced
    turn.mark_loaded([user("x", id="a"), user("y", id="b")])
    assert turn.loaded_ids == {"a", "b"}


# --- calling hooks ----------------------------------------------------------------------------------


class Hooks:
    id = "hooks"

    def sync(self, ctx: Any) -> Any:
        return ["sync", ctx]

    async def coroutine(self, ctx: Any) -> Any:
        await asyncio.sleep(0)
        return ["async", ctx]

    def returns_awaitable(self, ctx: Any) -> Any:
        return self.coroutine(ctx)

    def returns_none(self, ctx: Any) -> Any:
        return None


def test_sync_and_async_hooks_are_called_from_sync_code():
    hooks = Hooks()
    assert call_hook(hooks.sync, 1) == ["sync", 1]
    assert call_hook(hooks.coroutine, 2) == ["async", 2]
    assert call_hook(hooks.returns_awaitable, 3) == ["async", 3]
    assert call_hook(hooks.returns_none, 4) is None


def test_a_list_result_is_returned_as_it_is():
    result = [user("x", id="x")]
    assert call_hook(lambda ctx: result, None) is result


def test_a_sync_hook_returning_a_list_subclass_that_is_awaitable_is_not_awaited():
    class AwaitableList(list):
        def __await__(self):  # pragma: no cover - must never be awaited
            raise AssertionError("awaited")
            yield

    result = AwaitableList([1])
    assert call_hook(lambda ctx: result, None) is result


async def _free_coroutine(ctx: Any) -> str:
    return f"free {ctx}"


class CallableHook:
    async def __call__(self, ctx: Any) -> str:
        return f"callable {ctx}"


def test_hooks_that_are_not_bound_methods_are_told_apart_too():
    hooks = Hooks()
    assert is_async_hook(hooks.coroutine) is True
    assert is_async_hook(hooks.sync) is False
    # Asked again (the answer is remembered per function).
    assert is_async_hook(hooks.coroutine) is True
    assert is_async_hook(Hooks().sync) is False
    assert is_async_hook(partial(_free_coroutine)) is True
    assert is_async_hook(partial(hooks.sync)) is False
    assert is_async_hook(_free_coroutine) is True
    assert call_hook(partial(_free_coroutine), "x") == "free x"
    assert call_hook(CallableHook(), "y") == "callable y"
