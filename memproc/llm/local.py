"""`local/echo`: an offline, deterministic model for development, demos and tests."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest, ModelResponse, ToolCall, ToolSpec
from memproc.messages import Message, thaw
from memproc.tools import DEFAULT_WORKING_MEMORY_TEMPLATE, WORKING_MEMORY_TOOL

# DEFAULT_WORKING_MEMORY_TEMPLATE is used when the prompt shows neither data nor a template.
__all__ = ["DEFAULT_WORKING_MEMORY_TEMPLATE", "EchoModel"]

RECALL_PREFIX = "Remembered from another conversation"

_DATA_TAGS = ("working_memory", "working_memory_data")
# One line per recalled message, as "user: ...", "- assistant: ..." or "[2024-01-01] user: ...".
_RECALLED_LINE = re.compile(r"^\s*(?:[-*]\s*)?(?:\[[^\]]*\]\s*)?(?:user|assistant|tool)\s*:", re.I | re.M)
# Sentence ends: punctuation followed by a space or the end (so "a@b.com" and "3.5" stay whole).
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|\n+")
# Clauses inside a sentence: "My name is Ada and I live in Paris" states two facts.
_CLAUSE_END = re.compile(r",?\s+and\s+(?=(?:i|my|i'm)\b)|;", re.I)
_REMEMBER = re.compile(r"\bremember that\s+(?P<value>.+)", re.I)
_FACTS = (
    ("name", re.compile(r"\bmy name(?: is|'s)\s+(?P<value>[^,]+)", re.I)),
    ("location", re.compile(r"\bi live in\s+(?P<value>.+)", re.I)),
    ("occupation", re.compile(r"\bi work as\s+(?:an?\s+)?(?P<value>[^,]+)", re.I)),
    ("occupation", re.compile(r"\bi(?: am|'m)\s+an?\s+(?P<value>[^,]+)", re.I)),
)


@dataclass(frozen=True, slots=True)
class _Prompt:
    """What the echo model reads out of a request."""

    last_user: Message | None
    system: int
    history: int
    recalled: int
    working_memory: str | None  # the current data (or template) text; None when not injected
    tool_result: Message | None  # this turn's result of updateWorkingMemory, if any
    tool_called: bool  # updateWorkingMemory was already called this turn


class EchoModel:
    """An offline model that answers from what it was given, so memory's effect is visible.

    - The answer is `Echo: <last user text> [context: S system, H history messages; recalled: R;
      working memory: yes|no]`. H counts the non-system messages before the last user message.
      R counts, in system messages that begin with "Remembered from another conversation", the
      lines that start with a role (`user:`, `- assistant:`, `[date] user:`; a message without such
      lines counts as one), plus history messages whose metadata has `recalled` set. Working memory
      is "yes" when a system message holds `<working_memory>` (or `<working_memory_data>`) tags.
    - When the tool `updateWorkingMemory` is offered and the last user message says "my name is X",
      "I live in X", "I work as X" / "I am a X" or "remember that X", it first answers with one tool
      call whose `memory` is the current working memory (the text inside the tags, or the
      `<working_memory_template>` / default template when empty) with the Name, Location,
      Occupation or Facts line filled in. Once that call is in the prompt (or its result is), it
      answers with text; it never calls the tool twice in a turn, nor when nothing would change,
      nor when the tool takes a JSON object (schema mode) rather than Markdown.
    - Usage counts whitespace-separated words as tokens. The same request gives the same answer.
    """

    id = "local/echo"

    def __repr__(self) -> str:
        return "EchoModel()"

    def generate(self, request: ModelRequest) -> ModelResponse:
        prompt = _read(request.messages)
        prompt_tokens = sum(_words(_message_text(m)) for m in request.messages)
        if _asks_for_title(request.messages) and prompt.last_user is not None:
            title = _title_from(prompt.last_user.text)
            return ModelResponse(text=title, usage=_usage(prompt_tokens, _words(title)), finish_reason="stop")
        call = self._working_memory_call(request, prompt)
        if call is not None:
            completion = _words(json.dumps(call.args))
            return ModelResponse(
                tool_calls=[call], usage=_usage(prompt_tokens, completion), finish_reason="tool_calls"
            )
        text = _answer(prompt)
        return ModelResponse(text=text, usage=_usage(prompt_tokens, _words(text)), finish_reason="stop")

    def stream(self, request: ModelRequest) -> Iterator[StreamEvent]:
        """The same answer as `generate`, one word (with its trailing space) per event."""
        response = self.generate(request)
        for word in re.findall(r"\S+\s*|\s+", response.text):
            yield StreamEvent(type="text-delta", text=word)
        for call in response.tool_calls:
            yield StreamEvent(type="tool-call", tool_call=call)
        yield StreamEvent(type="finish", usage=response.usage, finish_reason=response.finish_reason)

    def _working_memory_call(self, request: ModelRequest, prompt: _Prompt) -> ToolCall | None:
        tool = next((t for t in request.tools if t.name == WORKING_MEMORY_TOOL), None)
        if tool is None or prompt.last_user is None or prompt.tool_called or prompt.tool_result:
            return None
        if not _takes_markdown(tool):
            return None
        current = (
            prompt.working_memory if prompt.working_memory is not None else DEFAULT_WORKING_MEMORY_TEMPLATE
        )
        updated = update_markdown(current, prompt.last_user.text)
        if updated == current:
            return None
        digest = hashlib.sha256(f"{prompt.last_user.id}\0{updated}".encode()).hexdigest()[:24]
        return ToolCall(id=f"call_echo_{digest}", name=WORKING_MEMORY_TOOL, args={"memory": updated})


def update_markdown(memory: str, text: str) -> str:
    """`memory` with the facts stated in `text` filled into their Markdown lines."""
    for kind, value in extract_facts(text):
        if kind == "name":
            memory = _set_name(memory, value)
        elif kind == "location":
            memory = _set_line(memory, ("Location",), value)
        elif kind == "occupation":
            memory = _set_line(memory, ("Occupation",), value)
        elif kind == "fact":
            memory = _set_line(memory, ("Facts",), value, append=True)
    return memory


def extract_facts(text: str) -> list[tuple[str, str]]:
    """The (kind, value) facts a message states, in order; kinds: name, location, occupation, fact."""
    facts: list[tuple[str, str]] = []
    for sentence in _SENTENCE_END.split(text):
        remember = _REMEMBER.search(sentence)
        if remember:  # "remember that I live in Paris" is one fact, not a location update
            facts.append(("fact", _clean(remember.group("value"))))
            continue
        for clause in _CLAUSE_END.split(sentence):
            for kind, pattern in _FACTS:
                match = pattern.search(clause)
                if match and _clean(match.group("value")):
                    facts.append((kind, _clean(match.group("value"))))
                    break
    return [(kind, value) for kind, value in facts if value]


def _set_name(memory: str, name: str) -> str:
    if _find_line(memory, ("First Name",)):
        first, _, last = name.partition(" ")
        if last and _find_line(memory, ("Last Name",)):
            return _set_line(_set_line(memory, ("First Name",), first), ("Last Name",), last)
        return _set_line(memory, ("First Name",), name)
    return _set_line(memory, ("Name",), name)


def _line_pattern(labels: Sequence[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(label) for label in labels)
    return re.compile(rf"^(?P<head>[ \t]*[-*][ \t]*\*\*(?:{names})\*\*:)[ \t]*(?P<value>.*)$", re.M | re.I)


def _find_line(memory: str, labels: Sequence[str]) -> re.Match[str] | None:
    return _line_pattern(labels).search(memory)


def _set_line(memory: str, labels: Sequence[str], value: str, *, append: bool = False) -> str:
    match = _find_line(memory, labels)
    if match is None:
        return f"{memory.rstrip()}\n- **{labels[0]}**: {value}".lstrip()
    old = match.group("value").strip()
    if append and old:
        if value in (part.strip() for part in old.split(";")):
            return memory
        value = f"{old}; {value}"
    return f"{memory[: match.start()]}{match.group('head')} {value}{memory[match.end() :]}"


def _clean(value: str) -> str:
    return value.strip().strip("\"'`").strip().rstrip(".!?,;:").strip()


def _takes_markdown(tool: ToolSpec) -> bool:
    memory = (tool.parameters or {}).get("properties", {}).get("memory", {})
    kind = memory.get("type") if isinstance(memory, dict) else None
    return kind in (None, "string") or (isinstance(kind, list) and "string" in kind)


def _read(messages: Sequence[Message]) -> _Prompt:
    last_user_index = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    system = [m for m in messages if m.role == "system"]
    before = [m for m in messages[: max(last_user_index, 0)] if m.role != "system"]
    after = messages[last_user_index + 1 :] if last_user_index >= 0 else []
    call_ids = {c.tool_call_id for m in after for c in m.tool_calls if c.tool_name == WORKING_MEMORY_TOOL}
    result = next(
        (
            m
            for m in after
            if any(r.tool_name == WORKING_MEMORY_TOOL or r.tool_call_id in call_ids for r in m.tool_results)
        ),
        None,
    )
    return _Prompt(
        last_user=messages[last_user_index] if last_user_index >= 0 else None,
        system=len(system),
        history=len(before),
        recalled=_count_recalled(system, before),
        working_memory=_working_memory(system),
        tool_result=result,
        tool_called=bool(call_ids),
    )


def _count_recalled(system: Sequence[Message], history: Sequence[Message]) -> int:
    count = sum(1 for m in history if m.metadata.get("recalled"))
    for message in system:
        text = message.text.lstrip()
        if text.startswith(RECALL_PREFIX):
            count += len(_RECALLED_LINE.findall(text)) or 1
    return count


def _working_memory(system: Sequence[Message]) -> str | None:
    for message in system:
        text = message.text
        for tag in _DATA_TAGS:
            match = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.S)
            if match is None:
                continue
            data = match.group(1).strip()
            if data:
                return data
            template = re.search(r"<working_memory_template>(.*?)</working_memory_template>", text, re.S)
            if template and template.group(1).strip():
                return template.group(1).strip()
            return DEFAULT_WORKING_MEMORY_TEMPLATE
    return None


def _answer(prompt: _Prompt) -> str:
    echoed = prompt.last_user.text if prompt.last_user is not None else ""
    working_memory = "yes" if prompt.working_memory is not None else "no"
    summary = (
        f"[context: {prompt.system} system, {prompt.history} history messages; "
        f"recalled: {prompt.recalled}; working memory: {working_memory}]"
    )
    if prompt.tool_result is not None:
        failed = any(r.is_error for r in prompt.tool_result.tool_results)
        summary += " [working memory update failed]" if failed else " [working memory updated]"
    return f"Echo: {echoed} {summary}"


def _message_text(message: Message) -> str:
    pieces = [message.text]
    pieces += [json.dumps(thaw(c.args), default=str) for c in message.tool_calls]
    pieces += [
        r.result if isinstance(r.result, str) else json.dumps(thaw(r.result)) for r in message.tool_results
    ]
    return " ".join(pieces)


def _words(text: str) -> int:
    return len(text.split())


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _asks_for_title(messages: Sequence[Message]) -> bool:
    """memproc's title task (services/titles.py) asks for "the title of a conversation"."""
    return any(m.role == "system" and "title of a conversation" in m.text for m in messages)


# Words a title does not end on ("My name is Ada and I" reads as cut off; "My name is Ada" does not).
_DANGLING = frozenset(
    "a an and are as at but by for from i in is it my of on or our so that the their this to was "
    "we what when where which who why with you your".split()
)


def _title_from(text: str, *, words: int = 10) -> str:
    """The first clause of the first message, at most `words` words, not ending on a word that leaves
    it dangling; capitalised: a plausible offline title."""
    clause = re.split(r"[.,;:!?\n]", text.strip(), maxsplit=1)[0]
    picked = re.findall(r"[\w'-]+", clause)[:words]
    while len(picked) > 2 and picked[-1].lower() in _DANGLING:
        picked.pop()
    title = " ".join(picked) or "New conversation"
    return title[:1].upper() + title[1:]
