"""Parallel: processors that check the same thing at the same time, so two judge-model guardrails
cost the slower one's time instead of the sum.

The runner sees a group as one processor. Its hooks run the members' hooks concurrently on what
the group was given: sync hooks each in a worker thread of memproc's pool, `async def` hooks as
tasks on one event loop (with the sync ones of the same group in worker threads beside them). That
is the same under `generate`/`stream` and `agenerate`/`astream`: a hook chain runs off the caller's
event loop either way (memproc.turns.aio runs it in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from django.db import close_old_connections

from memproc.conf import settings
from memproc.exceptions import ConfigurationError
from memproc.processors.base import ProcessorContext, processor_id
from memproc.processors.hooks import call_hook, is_async_hook

__all__ = ["GROUP_HOOKS", "MEMORY_IDS", "Parallel", "check_processors", "with_hook"]

# The hooks a group runs concurrently: each checks what it is given and may abort.
GROUP_HOOKS = (
    "process_input",
    "process_input_step",
    "process_output_step",
    "process_tool_result",
    "process_output_result",
)
# Hooks whose result the next processor reads (each stream part, the request to retry with): they
# run one member after another, in list order, as if the group were its members (`with_hook`).
SEQUENTIAL_HOOKS = ("process_output_stream", "process_api_error")
# Memory processors load and save: where they run in the order is what they do.
MEMORY_IDS = frozenset({"message-history", "semantic-recall", "working-memory"})

Call = tuple[Callable[..., Any], ProcessorContext, tuple[Any, ...]]

# One pool for every Parallel group of the process, not one per group or per turn: threads are
# started once, and ASYNC_THREADS bounds the judges running at once across all turns. It is not
# memproc.turns.aio's executor on purpose: a turn may itself run in one of that pool's threads, and a
# group waiting there on members queued behind it in the same bounded pool could wait forever.
# It holds threads, never results; nothing reads it but `pool()`.
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _group_hook(name: str) -> property:
    def get(self: Parallel) -> Callable[..., Any] | None:
        if not any(getattr(m, name, None) is not None for m in self.processors):
            return None  # the runner skips a processor without the hook, at no cost
        return partial(self._run, name)

    return property(get, doc=f"`{name}` of every member that has it, at the same time.")


class Parallel:
    """`Parallel(a, b)` in `input_processors` or `output_processors` runs `a` and `b` concurrently.

    The merge rule: members are checks. Each sees the same input (the messages, system messages,
    tools, tool result as the processors before the group left them) and keeps its own `ctx.state`.
    A member may abort: the first abort to happen wins, the members still running are cancelled
    (`async def` hooks) or ignored (a thread cannot be stopped: what it returns is dropped), and the
    group's processors after it do not matter. An exception in a member fails the turn the same way.
    A member may not change what it checks: its hook returns None or what it was given, unchanged
    (in `process_input_step` also `ctx.system_messages` and `ctx.tools`); anything else is a
    ConfigurationError when the turn runs, because two changes made side by side cannot both be
    kept. Put processors that change messages before or after the group.

    `process_output_stream` and `process_api_error` of members run one member after another, in
    list order (each reads what the one before returned). Refused when built (ConfigurationError):
    an empty group, something that is not a processor, a memory processor (`message-history`,
    `semantic-recall`, `working-memory`: they load and save where they sit) and a nested group.
    """

    process_input = _group_hook("process_input")
    process_input_step = _group_hook("process_input_step")
    process_output_step = _group_hook("process_output_step")
    process_tool_result = _group_hook("process_tool_result")
    process_output_result = _group_hook("process_output_result")

    def __init__(self, *processors: Any) -> None:
        if not processors:
            raise ConfigurationError("Parallel(...) needs at least one processor")
        for member in processors:
            if isinstance(member, Parallel):
                raise ConfigurationError("Parallel(...) cannot hold another Parallel: list its processors")
            try:
                pid = processor_id(member)
            except TypeError as exc:
                raise ConfigurationError(f"Parallel(...): {exc}") from exc
            if pid in MEMORY_IDS:
                raise ConfigurationError(
                    f"Parallel(...) cannot hold the memory processor {pid!r}: it loads or saves where "
                    "it sits in the order"
                )
        self.processors = tuple(processors)
        self.id = f"parallel({','.join(processor_id(p) for p in processors)})"

    def __repr__(self) -> str:
        return f"Parallel({', '.join(repr(p) for p in self.processors)})"

    @property
    def needs_stream_policy(self) -> str:
        """The strictest stream policy a member needs (memproc.turns.stream_policy)."""
        order = ("live", "sentences", "hold")
        needs = [getattr(m, "needs_stream_policy", "live") for m in self.processors]
        return max(needs, key=lambda need: order.index(need) if need in order else len(order))

    def _run(self, name: str, ctx: ProcessorContext, *args: Any) -> None:
        indexed = [(i, m) for i, m in enumerate(self.processors) if getattr(m, name, None) is not None]
        members = [m for _, m in indexed]
        contexts = [_member_context(ctx, i, m) for i, m in indexed]
        calls = [(getattr(m, name), c, args) for m, c in zip(members, contexts, strict=True)]
        if any(is_async_hook(hook) for hook, _, _ in calls):
            outcomes = async_to_sync(_on_one_loop)(calls)
        else:
            outcomes = _in_threads(calls)
        for member, member_ctx, (result, ms) in zip(members, contexts, outcomes, strict=True):
            if ctx.turn is not None:
                ctx.turn.info.time(member_ctx.processor_id, name, ms)
            _check_unchanged(self, member, name, ctx, member_ctx, result, args)
        return None


def with_hook(chain: Sequence[Any], name: str) -> list[Any]:
    """The processors of `chain` that have hook `name`, in order; for the hooks that run one member
    after another, a group stands for its members."""
    out: list[Any] = []
    for processor in chain:
        if isinstance(processor, Parallel) and name in SEQUENTIAL_HOOKS:
            out += [m for m in processor.processors if getattr(m, name, None) is not None]
        elif getattr(processor, name, None) is not None:
            out.append(processor)
    return out


def check_processors(processors: Sequence[Any], *, error: type[Exception]) -> None:
    """Fails early on something in a processor list that is not a processor (`error`, e.g.
    ConfigurationError for an agent, ValidationError for one call)."""
    for processor in processors:
        try:
            processor_id(processor)
        except TypeError as exc:
            raise error(str(exc)) from exc


def _member_context(ctx: ProcessorContext, index: int, member: Any) -> ProcessorContext:
    """The group's context for one member: its own id (its aborts name it), state and lists."""
    return dataclasses.replace(
        ctx,
        processor_id=processor_id(member),
        state=ctx.state.setdefault(f"member-{index}", {}),
        system_messages=tuple(ctx.system_messages),
        tools=list(ctx.tools),
    )


def _timed(hook: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = call_hook(hook, *args)
    return result, (time.perf_counter() - start) * 1000


def _pool_call(hook: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """A member's sync hook in a pool thread, which then lets its database connection go the way
    Django does after a request (kept only when CONN_MAX_AGE allows)."""
    try:
        return _timed(hook, *args)
    finally:
        close_old_connections()


def pool() -> ThreadPoolExecutor:
    """The worker threads of Parallel groups (ASYNC_THREADS of them), built on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=int(settings.ASYNC_THREADS), thread_name_prefix="memproc-parallel"
            )
        return _pool


def _in_threads(calls: list[Call]) -> list[Any]:
    """Every call in a pool thread; the first to fail (an abort or an error) is raised at once."""
    futures: list[Future[Any]] = [
        pool().submit(contextvars.copy_context().run, _pool_call, hook, ctx, *args)
        for hook, ctx, args in calls
    ]
    try:
        for future in as_completed(futures):
            future.result()  # the first to fail raises here
        return [future.result() for future in futures]
    finally:
        for future in futures:
            future.cancel()  # those not started yet; a running one finishes unread


async def _on_one_loop(calls: list[Call]) -> list[Any]:
    """`async def` hooks as tasks, sync ones in pool threads; the first to fail is raised and the
    tasks still running are cancelled."""
    loop = asyncio.get_running_loop()

    async def run(hook: Callable[..., Any], ctx: ProcessorContext, args: tuple[Any, ...]) -> Any:
        if not is_async_hook(hook):
            context = contextvars.copy_context()
            return await loop.run_in_executor(pool(), partial(context.run, _pool_call, hook, ctx, *args))
        start = time.perf_counter()
        result = await hook(ctx, *args)
        return result, (time.perf_counter() - start) * 1000

    tasks = [asyncio.ensure_future(run(hook, ctx, args)) for hook, ctx, args in calls]
    try:
        for next_done in asyncio.as_completed(tasks):
            await next_done
        return [task.result() for task in tasks]
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def _check_unchanged(
    group: Parallel,
    member: Any,
    name: str,
    ctx: ProcessorContext,
    member_ctx: ProcessorContext,
    result: Any,
    args: tuple[Any, ...],
) -> None:
    """The merge rule: a member returns None or what it was given, and leaves the context's lists."""
    if name == "process_tool_result":
        unchanged = result is None or result == args[0]
    else:
        same = isinstance(result, (list, tuple)) and list(result) == list(ctx.messages)
        unchanged = result is None or same
    if name == "process_input_step":
        unchanged = (
            unchanged
            and list(member_ctx.system_messages) == list(ctx.system_messages)
            and list(member_ctx.tools) == list(ctx.tools)
        )
    if not unchanged:
        raise ConfigurationError(
            f"Processor {processor_id(member)!r} in {group.id} changed what {name} gave it; the members "
            "of a Parallel group may only check (return None, or abort). Put processors that change "
            "messages, tools or results before or after the group."
        )
