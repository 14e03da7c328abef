"""What both protocols share: which of a resent conversation is new (and whether its tool results
answer calls), system messages from clients. Their frames are produced by `memproc.api.sse`'s
`stream_response` with each protocol's encoder, as memproc's own SSE is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rest_framework import serializers

from memproc.api.serializers.messages import MessagesField, message_errors
from memproc.api.views.checks import attachments_check
from memproc.conf import settings as memproc_settings
from memproc.exceptions import MemprocError
from memproc.messages import to_messages
from memproc.tools import SEARCH_MEMORY_TOOL, WORKING_MEMORY_TOOL

THREAD_HEADER = "X-Memproc-Thread-Id"
SYSTEM_ROLES = frozenset({"system", "developer"})


# --- the conversation a client resends -----------------------------------------------------------------


def loads_history(agent: Any) -> bool:
    """Whether the agent puts the thread's stored history in front of the model."""
    memory = agent.memory
    last = getattr(memory, "last_messages", False) if memory is not None else False
    return not isinstance(last, bool) and isinstance(last, int) and last > 0


def new_part(messages: Sequence[Mapping[str, Any]], *, thread_exists: bool, agent: Any) -> list[Any]:
    """The turn's input out of a conversation the client resends whole (both protocols do).

    On a stored thread of an agent that loads history, the thread is the record of the conversation:
    everything up to the client's last assistant message is its copy of that record, so only what
    follows is new. That also covers what the echo check of the pipeline (rule 17) cannot see: the
    server-side tool calls a client never received, and a blocked turn's input, which was never saved
    and must not be saved now. System messages are kept wherever they are (they are this turn's). On a
    new thread, or for an agent without history, the whole conversation is the input.

    The conversation's tool results must answer calls in it (`tool_results_check`), checked here on
    the whole of it since the new part alone no longer holds the calls its results answer."""
    items = list(messages)
    tool_results_check(items, thread_exists=thread_exists)
    if not (thread_exists and loads_history(agent)):
        return items
    last = max((i for i, m in enumerate(items) if m.get("role") == "assistant"), default=-1)
    system = [m for m in items[: last + 1] if m.get("role") == "system"]
    return [*system, *items[last + 1 :]]


def tool_results_check(messages: Sequence[Mapping[str, Any]], *, thread_exists: bool) -> None:
    """A tool result in the conversation a client sent must answer a call of the assistant message
    its run of tool messages follows, and each call must be answered by the tool messages right
    after its message; otherwise the provider would refuse the request (a 502 here, not a 400).
    Results before the conversation's first assistant message can answer only a stored thread's last
    message (not known here: they pass on a stored thread, and are orphans on a new one). Raises a
    400 with field errors `{"messages": {index: {"tool_call_id": [...]}}}`, by index in `messages`.
    Messages that do not parse are left to `MessagesField`, which reports them."""
    if not any(isinstance(m, Mapping) and m.get("role") in ("tool", "assistant") for m in messages):
        return
    try:
        parsed = to_messages(list(messages))
    except (MemprocError, TypeError, AttributeError, KeyError, ValueError):
        return
    errors = message_errors(parsed, thread_calls=None if thread_exists else set())
    orphans = {i: {"tool_call_id": e["tool_call_id"]} for i, e in errors.items() if "tool_call_id" in e}
    if orphans:
        raise serializers.ValidationError({"messages": orphans})


def answerable(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the turn's input ends with something for the agent to answer (not with its own words)."""
    said = [m for m in messages if m.get("role") != "system"]
    return bool(said) and said[-1].get("role") != "assistant"


def drop_blocked(
    messages: Sequence[Mapping[str, Any]], is_blocked: Callable[[Mapping[str, Any]], bool]
) -> list[Any]:
    """Without the exchanges a tripwire blocked: an assistant message that is a block notice (OpenAI's
    `refusal`, the AI SDK's `data-tripwire` part) and the input it answered, the messages since the
    assistant message before it. A blocked turn saved nothing, and its input must not reach memory
    when the client resends the conversation (rule 8), even on a thread that does not exist yet."""
    kept: list[Any] = []
    since = 0  # where the current turn's input starts in `kept`
    for message in messages:
        if message.get("role") == "assistant" and is_blocked(message):
            kept[since:] = [m for m in kept[since:] if m.get("role") == "system"]
            continue
        kept.append(message)
        if message.get("role") == "assistant":
            since = len(kept)
    return kept


def without_system(messages: list[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """System (and OpenAI "developer") messages become system messages of the turn when the setting
    `API_ALLOW_SYSTEM_MESSAGES` is on (used for this turn only, never saved: rule 18); otherwise they are
    left out, since the agent's own instructions are the system prompt. Returns the messages and how
    many were left out."""
    allowed = memproc_settings.API_ALLOW_SYSTEM_MESSAGES
    kept: list[Mapping[str, Any]] = []
    ignored = 0
    for message in messages:
        if message.get("role") in SYSTEM_ROLES:
            if not allowed:
                ignored += 1
                continue
            message = {**message, "role": "system"}
        kept.append(message)
    return kept, ignored


def internal_tools(agent: Any) -> set[str]:
    """Tools whose calls are memory's own (working memory, the memory search): never saved, so never
    shown either."""
    return {
        WORKING_MEMORY_TOOL,
        SEARCH_MEMORY_TOOL,
        *(t.name for t in agent.tools if getattr(t, "internal", False)),
    }


def waiting_tools(agent: Any) -> set[str]:
    """Tools whose calls wait (approval-gated and client-side ones): such a call suspends the turn."""
    return {t.name for t in agent.tools if getattr(t, "waits", None) is not None}


# --- streaming -------------------------------------------------------------------------------------


def turn_input_check(part: list[Any], *, resource_id: str, unanswerable: str) -> None:
    """The new part of a resent conversation, checked as a turn's input: it ends with a message the
    agent can answer (`unanswerable` says otherwise, in the protocol's words), every message passes
    the API's message rules, and its files are acceptable for `resource_id`."""
    if not answerable(part):
        raise serializers.ValidationError({"messages": [unanswerable]})
    try:
        MessagesField().run_validation(part)
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({"messages": exc.detail}) from exc
    attachments_check(part, resource_id=resource_id)
