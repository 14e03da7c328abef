"""A turn's start: its input normalised and checked, and its thread's ownership read, into the
`Turn` (memproc.processors.turn) that its processors and its save share."""

from __future__ import annotations

from django.utils import timezone

from memproc.exceptions import ThreadNotFoundError, ValidationError
from memproc.messages import MessageInput, new_id
from memproc.models import split_thread_key, thread_key
from memproc.processors.conversation import unanswered_calls
from memproc.processors.turn import Turn
from memproc.selectors.messages import message_ids_from
from memproc.selectors.threads import thread_key_for
from memproc.services.store import DjangoMemoryStore
from memproc.turns.input import ThreadRef, TurnInput
from memproc.turns.plan import TurnPlan

__all__ = ["turn_start"]


def turn_start(
    plan: TurnPlan,
    messages: MessageInput | TurnInput,
    *,
    thread_id: str | None,
    resource_id: str | None,
    thread: ThreadRef | None = None,
    summaries: bool = True,
    thread_memory: bool = False,
    history: int = 0,
    replace_from: str | None = None,
) -> Turn:
    """Normalises input (unless it comes as a `TurnInput`) and checks thread ownership: one query
    when the call has memory, and one more for the thread's compaction summary with `summaries`; the
    thread's working memory comes with the first with `thread_memory`, and so do its newest
    `history` messages (the turn's history window; a thread without messages costs one more query).
    A `thread` the caller resolved already (the HTTP views) is not read again.

    System messages in the input are kept apart: used for this turn after the instructions, never
    saved (rule 18).

    With `replace_from` (a stored message of the thread) the turn replaces that message and every
    later one: it reads the thread as it was before them, and its save deletes them in the same
    transaction; a turn that fails, is blocked or saves nothing leaves them as they were."""
    now = timezone.now()
    given_input = TurnInput.of(messages)
    client_ids = set(given_input.client_ids)
    given = list(given_input.messages)
    system_input = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in given
        if m.role == "system"
    ]
    inputs = [m for m in given if m.role != "system"]
    if not inputs:
        raise ValidationError("messages need at least one message that is not a system message")
    ids = [m.id for m in inputs]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ValidationError(f"message id {twice!r} is used twice in this turn's input; ids must be unique")
    unanswered = unanswered_calls(inputs)
    if unanswered:
        index, calls = next(iter(unanswered.items()))
        raise ValidationError(
            f"tool call {calls[0]!r} of input message {index} has no result: the tool messages right after "
            "it must answer each of its calls (a provider refuses an unanswered call)"
        )
    store = None
    replaces: list[str] = []
    exists, title, last_sequence = False, "", None
    if plan.has_memory:
        store = DjangoMemoryStore(summaries=summaries, thread_memory=thread_memory, history=history)
        if thread is not None:
            thread_id, resource_id = thread.thread_id, thread.resource_id
            exists, title, last_sequence = thread.exists, thread.title, thread.last_sequence
            if exists:
                store.thread_known(thread)
        else:
            if not resource_id:
                resource_id = _resource_of(thread_id)
            thread_id = thread_id or new_id()
            row = store.thread_owner(thread_id=thread_id, resource_id=resource_id)
            if row is not None:
                _, title, last_sequence = row
                exists = True
        if exists and replace_from:
            cut, replaces = message_ids_from(
                thread_key=thread_key(resource_id, thread_id), message_id=replace_from
            )
            if cut is not None:
                store = DjangoMemoryStore(
                    summaries=summaries, thread_memory=thread_memory, before=cut, hidden=replaces
                )
                store.thread_owner(thread_id=thread_id, resource_id=resource_id)
    inputs = [
        m.replace(created_at=m.created_at or now, thread_id=thread_id, resource_id=resource_id)
        for m in inputs
    ]
    turn = Turn(
        agent=plan.agent,
        thread_id=thread_id,
        resource_id=resource_id,
        store=store,
        input_messages=inputs,
        client_ids=client_ids,
        system_input=system_input,
        thread_exists=exists,
        thread_title=title,
        thread_last_sequence=last_sequence,
        memory_options=dict(plan.memory_options),
        replaces=replaces,
    )
    for t in plan.tools:
        turn.add_tool(t)
    return turn


def _resource_of(thread_id: str | None) -> str:
    """The resource of the one thread called `thread_id`, for a caller who named no resource (Python;
    the HTTP API always settles it). A thread id names a thread within its resource, so an id that
    several resources use needs the caller to say which."""
    if not thread_id:
        raise ValidationError("resource_id is required to start a thread")
    try:
        return split_thread_key(thread_key_for(thread_id=thread_id))[0]
    except ThreadNotFoundError:
        raise ValidationError("resource_id is required to start a thread") from None
