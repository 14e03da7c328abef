"""The request side of the Chat Completions protocol (memproc.api.protocols.openai): the request body,
the client-side tools a request may list, OpenAI chat messages as memproc's input, and the `tool`
messages that answer a waiting client-side call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from memproc.api.protocols.common import tool_results_check
from memproc.api.protocols.openai_render import WAITING_NOTICE
from memproc.exceptions import PendingCallConflict
from memproc.messages import has_unstorable_text
from memproc.models import PendingToolCall
from memproc.services import approvals

ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatCompletionRequest(serializers.Serializer):
    """The fields memproc reads; the model's sampling options are the agent's, so others are ignored."""

    model = serializers.CharField(max_length=255)
    messages = serializers.ListField(child=serializers.DictField(), allow_empty=False)
    stream = serializers.BooleanField(required=False, default=False, allow_null=True)
    stream_options = serializers.DictField(required=False, allow_null=True)
    metadata = serializers.DictField(
        child=serializers.CharField(max_length=512, allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
    )
    n = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1)
    tools = serializers.ListField(required=False, allow_null=True)

    def validate_tools(self, value: list[Any] | None) -> list[Any] | None:
        for item in value or ():
            if tool_name(item) is None:
                raise serializers.ValidationError(
                    'Each tool must be {"type": "function", "function": {"name": ...}}, naming one of '
                    "the agent's client-side tools."
                )
        return value

    def validate_messages(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for message in value:
            if message.get("role") not in ROLES:
                raise serializers.ValidationError(
                    f"Unknown role {message.get('role')!r}; expected one of {', '.join(ROLES)}."
                )
        return value


def tool_name(item: Any) -> str | None:
    """The function name of one entry of a request's `tools`, or None for anything else."""
    if not isinstance(item, Mapping) or item.get("type") != "function":
        return None
    function = item.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def client_tools_check(agent: Any, tools: list[Any] | None) -> None:
    """A request may list the agent's own client-side tools (the openai SDK's tool loops send the
    tools they run); the agent's definitions are the ones the model sees. Any other tool is a 400: the
    agent's other tools run on the server, and a tool it does not declare would never be offered."""
    own = sorted(t.name for t in agent.tools if t.waits == "client")
    for item in tools or ():
        name = tool_name(item)
        if name not in own:
            offered = ", ".join(own) if own else "none"
            raise serializers.ValidationError(
                {
                    "tools": [
                        f"`{name}` is not one of this agent's client-side tools ({offered}): memproc "
                        "agents run their own tools on the server, and a request may list only the "
                        "agent's client-side tools."
                    ]
                }
            )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def is_refusal(message: Mapping[str, Any]) -> bool:
    """An assistant message that is a block notice: a refusal and no content (what memproc answers for a
    tripwire, which clients append to the conversation they resend)."""
    return bool(message.get("refusal")) and not _text(message.get("content"))


def is_waiting(message: Mapping[str, Any]) -> bool:
    """An assistant message that says a call waits for approval: its exchange belongs to the waiting
    turn, which saves its input itself once the call is decided, so a resent copy is never saved."""
    return WAITING_NOTICE.search(_text(message.get("content"))) is not None


def is_not_for_memory(message: Mapping[str, Any]) -> bool:
    return is_refusal(message) or is_waiting(message)


def memproc_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message as memproc's input (`memproc.messages.to_messages` reads OpenAI content
    parts and tool calls); an assistant's refusal and audio are not carried over."""
    role = message["role"]
    if role in ("system", "developer"):
        return {"role": role, "content": _text(message.get("content"))}
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content"))}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        return out
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.get("tool_call_id") or "",
            "content": _text(message.get("content")),
        }
    content = message.get("content")
    return {"role": "user", "content": content if isinstance(content, (str, list)) else ""}


def answered_call(
    messages: list[Mapping[str, Any]], *, agent: Any, resource_id: str, thread_id: str | None
) -> tuple[Any, Any] | None:
    """The client-side call of this thread that the conversation's closing `tool` messages answer,
    and the answer: the tool message's content, as JSON when it parses, else the text. None when they
    answer no such call (then the conversation is an ordinary turn's input). PendingCallConflict
    (409) for a call that is no longer pending; a 400 when the answer does not follow the assistant
    message holding the call, or holds what cannot be stored."""
    closing: dict[str, Mapping[str, Any]] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        closing.setdefault(str(message.get("tool_call_id") or ""), message)
    if not closing or not any(t.waits == "client" for t in agent.tools):
        return None  # no query for an agent with no client-side tool
    calls = approvals.client_calls_in_thread(
        list(closing), agent_id=agent.id, thread_id=thread_id or "", resource_id=resource_id
    )
    if not calls:
        return None
    pending = calls[0]  # the waiting one, if any
    if pending.state != PendingToolCall.State.PENDING:
        raise PendingCallConflict("This tool call is no longer pending: its turn has its result.")
    tool_results_check(messages, thread_exists=False)  # the call must be in the conversation
    value = _tool_result(closing[pending.tool_call_id].get("content"))
    if has_unstorable_text(value):
        raise serializers.ValidationError(
            {"messages": ["NUL characters and lone surrogates are not allowed."]}
        )
    return pending, value


def _tool_result(content: Any) -> Any:
    """A tool message's content as the result: JSON when it parses as standard JSON (not NaN or
    Infinity, which no database stores as JSON), else the text."""
    text = _text(content)
    try:
        return json.loads(text, parse_constant=_not_json)
    except ValueError:
        return text


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
