"""The reference model of memory: what a turn's model requests must hold and what the turn must store.

Written for a reader, not for speed: plain lists, no caches, no database. Given the stored threads
(`World`), an agent's memory configuration (`Config`) and one turn (`Turn`), `expected_turn` says
which messages each model call of the turn receives and which messages the turn saves. The tests
in this folder run the real agent on the same scenario and compare.

Each rule below cites DESIGN.md §2. The reference uses memproc's value types (`TextPart`,
`ToolCallPart`, ...) and its token counter as neighbours; everything it decides, it decides here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from memproc.messages import Message, TextPart, ToolCallPart, ToolResultPart

WM_TOOL = "updateWorkingMemory"
SEARCH_TOOL = "search_memory"
MEMORY_TOOLS = (WM_TOOL, SEARCH_TOOL)  # memory's own tools: their calls are never saved
REPLY_TOKENS = 3  # TokenLimiter's priming of every reply


@dataclass(frozen=True)
class Msg:
    """One message as the reference sees it: its role and parts; `id` when one is known (a client
    gave it, or the real save assigned it), `embedded` when recall can find it."""

    role: str
    parts: tuple[Any, ...]
    id: str | None = None
    embedded: bool = False
    thread_id: str | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def calls(self) -> tuple[str, ...]:
        return tuple(p.tool_call_id for p in self.parts if isinstance(p, ToolCallPart))

    @property
    def results(self) -> tuple[str, ...]:
        return tuple(p.tool_call_id for p in self.parts if isinstance(p, ToolResultPart))

    def shape(self) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
        """What two messages must share to be the same message in a prompt or a thread."""
        return (self.role, self.text, self.calls, self.results)

    def without_tool_parts(self, *, keep: Collection[str] = ()) -> Msg | None:
        """This message without its tool calls and results, but those of the call ids in `keep`."""
        parts = tuple(
            p
            for p in self.parts
            if not (isinstance(p, (ToolCallPart, ToolResultPart)) and p.tool_call_id not in keep)
        )
        return dataclasses.replace(self, parts=parts) if parts else None

    def message(self) -> Message:
        """The equivalent memproc Message, to count its tokens."""
        return Message.create(self.role, self.parts, id=self.id or "reference")


def text_msg(role: str, text: str, *, id: str | None = None) -> Msg:
    return Msg(role, (TextPart(text),), id=id)


@dataclass(frozen=True)
class Recall:
    top_k: int
    before: int
    after: int
    scope: str  # "thread" | "resource"
    threshold: float | None


@dataclass(frozen=True)
class Config:
    """An agent's memory and processors, as far as what a turn sees and saves depends on them."""

    last_messages: int | bool = 10  # False: no history loaded and none saved
    history_tokens: int | None = None
    recall: Recall | None = None
    working_memory: str | None = None  # None, "thread" or "resource"
    wm_schema: bool = False  # schema mode (JSON deep merge) instead of Markdown
    read_only: bool = False
    tool_filter: bool = False  # ToolCallFilter() among the input processors
    token_limit: int | None = None  # TokenLimiter(limit) last among the input processors
    # MessageHistory placed by hand among the input processors (rule 3): it then runs after
    # SemanticRecall, so recall does not know the window yet.
    history_by_hand: bool = False
    search_top_k: int | None = None  # Memory(search_tool={"top_k": n}); None: no search tool

    @property
    def search_scope(self) -> str:
        """The widest scope `search_memory` may search: recall's (the agent's, whatever a call
        overrides), else "resource"."""
        return self.recall.scope if self.recall is not None else "resource"

    @property
    def embeds(self) -> bool:
        """Whether saved messages are embedded: recall or the search tool searches them."""
        return self.recall is not None or self.search_top_k is not None

    def for_call(self, options: dict[str, Any]) -> Config:
        """Rule 22: per-call memory options override the agent's for one turn."""
        changes: dict[str, Any] = {}
        if "last_messages" in options:
            changes["last_messages"] = options["last_messages"]
        if "read_only" in options:
            changes["read_only"] = options["read_only"]
        if options.get("semantic_recall") is False:
            changes["recall"] = None
        return dataclasses.replace(self, **changes)


@dataclass
class Round:
    """One model response of a turn: tool calls (then the tools run and the model is called again), or
    the final text."""

    text: str = ""
    calls: tuple[ToolCallPart, ...] = ()
    results: tuple[ToolResultPart, ...] = ()  # what the tools answer


@dataclass
class Turn:
    thread_id: str
    resource_id: str
    inputs: list[Msg]  # in the order the caller gave them; system messages included (rule 18)
    rounds: list[Round]  # the model's responses, the last one final (no calls)
    options: dict[str, Any] = field(default_factory=dict)
    block_input: bool = False  # an input guardrail aborts (rule 4)
    block_output: bool = False  # an output guardrail aborts on the final result (rule 5)


@dataclass
class Thread:
    messages: list[Msg] = field(default_factory=list)
    working_memory: str = ""


@dataclass
class World:
    """Everything stored: threads by (resource, thread id), resources' working memory, vectors."""

    threads: dict[tuple[str, str], Thread] = field(default_factory=dict)
    resource_memory: dict[str, str] = field(default_factory=dict)
    archived: set[tuple[str, str]] = field(default_factory=set)  # Memory.archive_thread

    def thread(self, resource_id: str, thread_id: str) -> Thread | None:
        return self.threads.get((resource_id, thread_id))

    def left_out(self, turn: Turn, scope: str) -> set[tuple[str, str]]:
        """The archived threads a search of `scope` leaves out: in resource scope, the resource's
        archived threads but the turn's own (recall's `include_archived` is off)."""
        if scope != "resource":
            return set()
        return {
            k for k in self.archived if k[0] == turn.resource_id and k != (turn.resource_id, turn.thread_id)
        }


@dataclass
class Expected:
    requests: list[list[Msg]]  # every model call's non-system messages, in order
    system: list[str]  # the first request's system message kinds, in order
    working_memory: str | None  # the working memory the first request shows (None: none shown)
    cross_thread: set[str]  # ids recalled from other threads (the system block)
    saved: list[Msg]  # what the turn stores, in order (rule 9: all or nothing)
    new_working_memory: str | None  # the scope's working memory after the turn (None: unchanged)
    blocked: bool
    ambiguous_recall: bool  # scores too close to call: the prompt is not compared this turn


@dataclass(frozen=True)
class Searched:
    """What one `search_memory` call must answer: refused (the agent may not search that wide), or
    its hits, best first, as (message id, thread id, score rounded as memproc reports it)."""

    scope: str
    refused: bool = False
    hits: tuple[tuple[str, str, float], ...] = ()
    ambiguous: bool = False


# --- the turn ---------------------------------------------------------------------------------------


def expected_turn(
    world: World,
    config: Config,
    turn: Turn,
    *,
    embed: Any,
    counter: Any,
    system_tokens: Any,
    search_answer: Any = None,
) -> Expected:
    """What the real agent must do for `turn`. `embed(text) -> list[float]` is the agent's embedder;
    `counter.count_message(Message)` its token counter; `system_tokens(system_input, working_memory,
    recalled_elsewhere)` the tokens of the system messages those make; `search_answer(Searched)` the
    tool result a search's hits make (their wording is the processors' own, so the caller builds
    them with memproc's formatting)."""
    cfg = config.for_call(turn.options)
    thread = world.thread(turn.resource_id, turn.thread_id)
    stored = list(thread.messages) if thread else []

    system_input = [m for m in turn.inputs if m.role == "system"]  # rule 18: this turn only
    # Without MessageHistory (`last_messages=False`) the caller's messages are the conversation.
    new = new_input(turn.inputs, stored if cfg.last_messages is not False else [])

    window = history_window(stored, cfg, counter)
    recalled_here, recalled_elsewhere, ambiguous = recall(world, cfg, turn, stored, window, new, embed)
    first = new[0] if new else None
    memory = whole_pairs(sorted_by_sequence(stored, window + recalled_here), then=first)
    if cfg.tool_filter:  # ToolCallFilter: no past tool calls or results in the prompt, but those of
        # a call the caller's own messages name (a call they answer, or echo), whole with its result:
        # the caller's messages stay a valid conversation, and a call never stays without its result.
        named = {i for m in new for i in (*m.calls, *m.results)}
        memory = [k for m in memory if (k := m.without_tool_parts(keep=named)) is not None]

    wm_shown = working_memory_shown(world, cfg, turn)
    system = ["instructions", *("input" for _ in system_input)]
    system += ["working-memory"] if wm_shown is not None else []
    system += ["recall"] if recalled_elsewhere else []
    fixed = system_tokens(system_input, wm_shown, recalled_elsewhere) if cfg.token_limit else 0

    result = Expected(
        requests=[],
        system=system,
        working_memory=wm_shown,
        cross_thread={m.id for m in recalled_elsewhere if m.id},
        saved=[],
        new_working_memory=None,
        blocked=False,
        ambiguous_recall=ambiguous,
    )
    if turn.block_input:  # rule 4: the model is never called, nothing is saved
        result.blocked = True
        return result

    # What `search_memory` never repeats: what memory loaded into the prompt and the caller's input.
    in_prompt = {m.id for m in [*window, *recalled_here, *recalled_elsewhere, *turn.inputs] if m.id}
    responses: list[Msg] = []
    wm = wm_shown
    for round_ in turn.rounds:
        if cfg.token_limit is not None:
            fitted = newest_that_fit(memory, [*new, *responses], counter, cfg.token_limit - fixed)
            if fitted is None:  # the input and this turn's responses alone exceed the limit
                result.blocked = True
                return result
            body = fitted
        else:
            body = memory
        result.requests.append([*body, *new, *responses])
        if round_.calls:
            results = []
            for call, answer in zip(round_.calls, round_.results, strict=True):
                if call.tool_name == SEARCH_TOOL:
                    searched = memory_search(world, config, turn, call.args, in_prompt, embed)
                    result.ambiguous_recall |= searched.ambiguous
                    answer = search_answer(call, searched)
                results.append(answer)
            responses += [
                Msg("assistant", (*((TextPart(round_.text),) if round_.text else ()), *round_.calls)),
                Msg("tool", tuple(results)),
            ]
            for call in round_.calls:
                if call.tool_name == WM_TOOL:
                    wm = merge_working_memory(wm or "", call.args["memory"], schema=cfg.wm_schema)
        else:
            responses.append(text_msg("assistant", round_.text))

    if turn.block_output:  # rule 5: nothing of the turn is saved
        result.blocked = True
        return result
    if cfg.read_only:  # rule 12: memory is loaded, nothing is saved
        return result
    if cfg.last_messages is not False:  # rule 12: no history kept, none saved
        result.saved = savable([*new, *responses])
    if wm is not None and wm != wm_shown:
        result.new_working_memory = wm
    return result


def apply_turn(world: World, config: Config, turn: Turn, expected: Expected, saved: Sequence[Msg]) -> None:
    """Records a turn's saves in `world`; `saved` is `expected.saved` with the ids the real save gave."""
    cfg = config.for_call(turn.options)
    if expected.blocked:
        return
    key = (turn.resource_id, turn.thread_id)
    if saved:
        embedded = cfg.embeds
        thread = world.threads.setdefault(key, Thread())
        thread.messages += [
            dataclasses.replace(
                m,
                embedded=embedded and m.role in ("user", "assistant") and bool(m.text.strip()),
                thread_id=turn.thread_id,
            )
            for m in saved
        ]
    if expected.new_working_memory is not None:
        world.threads.setdefault(key, Thread())
        if cfg.working_memory == "thread":
            world.threads[key].working_memory = expected.new_working_memory
        else:
            world.resource_memory[turn.resource_id] = expected.new_working_memory


# --- input ------------------------------------------------------------------------------------------


def new_input(inputs: Sequence[Msg], stored: Sequence[Msg]) -> list[Msg]:
    """The turn's own new messages: not system (rule 18), not already stored in this thread (rule 11:
    the stored copy wins), and not the leading run that repeats the thread's newest messages without
    ids (rule 17). The last input message is always new."""
    rest = [m for m in inputs if m.role != "system"]
    stored_ids = {m.id for m in stored}
    echoed = 0
    for k in range(min(len(rest) - 1, len(stored)), 0, -1):
        if [m.shape() for m in rest[:k]] == [m.shape() for m in stored[-k:]]:
            echoed = k
            break
    return [m for i, m in enumerate(rest) if i >= echoed and m.id not in stored_ids]


def savable(messages: Sequence[Msg]) -> list[Msg]:
    """Rule 15 and 16: the working-memory tool's calls and results are never saved, nor the memory
    search's."""
    kept = []
    for m in messages:
        parts = tuple(p for p in m.parts if getattr(p, "tool_name", None) not in MEMORY_TOOLS)
        if parts:
            kept.append(dataclasses.replace(m, parts=parts))
    return kept


# --- history ----------------------------------------------------------------------------------------


def history_window(stored: Sequence[Msg], cfg: Config, counter: Any) -> list[Msg]:
    """The newest min(N, stored) messages; with `history_tokens`, the newest whole tool groups of
    those that fit the budget (the new input is not counted)."""
    n = cfg.last_messages
    if n is False or n == 0:
        return []
    window = list(stored[-n:])
    if cfg.history_tokens is None:
        return window
    return _newest_groups_within(whole_pairs(window), cfg.history_tokens, counter)


def _newest_groups_within(messages: Sequence[Msg], budget: int, counter: Any) -> list[Msg]:
    kept: list[Msg] = []
    used = 0
    for group in reversed(groups(messages)):
        cost = sum(counter.count_message(m.message()) for m in group)
        if used + cost > budget:
            break
        used += cost
        kept[:0] = group
    return kept


def sorted_by_sequence(stored: Sequence[Msg], chosen: Sequence[Msg]) -> list[Msg]:
    """`chosen` (stored messages) in thread order, each once."""
    ids = {m.id for m in chosen}
    return [m for m in stored if m.id in ids]


def whole_pairs(messages: Sequence[Msg], *, then: Msg | None = None) -> list[Msg]:
    """Rule 16: an assistant call stays only with its result in the tool message right after it, and
    a result only with its call in the assistant message right before it. `then` is the message that
    follows in the request (the turn's first input): a remembered call it answers stays."""
    kept: list[Msg] = []
    for i, m in enumerate(messages):
        before = messages[i - 1] if i > 0 else None
        after = messages[i + 1] if i + 1 < len(messages) else then
        answered = set(after.results) if after is not None and after.role == "tool" else set()
        asked = set(before.calls) if before is not None and before.role == "assistant" else set()
        parts = tuple(
            p
            for p in m.parts
            if not (isinstance(p, ToolCallPart) and p.tool_call_id not in answered)
            and not (isinstance(p, ToolResultPart) and p.tool_call_id not in asked)
        )
        if parts:
            kept.append(m if parts == m.parts else dataclasses.replace(m, parts=parts))
    return kept


def groups(messages: Sequence[Msg]) -> list[list[Msg]]:
    """Messages grouped so a call and its results are one group (a tool message joins the one before)."""
    out: list[list[Msg]] = []
    for m in messages:
        if m.role == "tool" and out:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def newest_that_fit(
    memory: Sequence[Msg], pinned: Sequence[Msg], counter: Any, budget: int
) -> list[Msg] | None:
    """TokenLimiter: the longest newest run of `memory` (whole groups) such that it, `pinned` and the
    reply's priming fit `budget`; None when `pinned` alone does not fit."""
    cost = lambda ms: sum(counter.count_message(m.message()) for m in ms)  # noqa: E731
    room = budget - REPLY_TOKENS - cost(pinned)
    if room < 0:
        return None
    kept: list[Msg] = []
    for group in reversed(groups(memory)):
        if cost(kept) + cost(group) > room:
            break
        kept[:0] = group
    return kept


# --- semantic recall --------------------------------------------------------------------------------


def recall(
    world: World,
    cfg: Config,
    turn: Turn,
    stored: Sequence[Msg],
    window: Sequence[Msg],
    new: Sequence[Msg],
    embed: Any,
) -> tuple[list[Msg], list[Msg], bool]:
    """Rule 14: the top_k stored messages most similar (cosine) to the last new user text, in scope,
    not already in the prompt, at or above the threshold; each with `before`/`after` neighbours of
    its own thread. Returns (this thread's, other threads', whether the scores were too close to
    call)."""
    r = cfg.recall
    query = next((m.text for m in reversed(new) if m.role == "user" and m.text.strip()), "")
    if r is None or not query:
        return [], [], False
    # What is in the prompt when recall runs: the input as given, and the window unless a
    # MessageHistory placed by hand loads it later (the conversation then keeps one copy of each).
    if cfg.history_by_hand:
        present = {m.id for m in turn.inputs if m.role != "system"}
    else:
        present = {m.id for m in [*window, *new]}
    q = embed(query)
    left_out = world.left_out(turn, r.scope)
    ranked = _ranked(world, turn, r.scope, q, embed)
    candidates = [c for c in ranked if c[1] not in present and c[2] not in left_out]
    above = [c for c in candidates if r.threshold is None or c[0] >= r.threshold]
    hits = above[: r.top_k]
    ambiguous = _close(candidates, hits, r) or _overfetch_short(ranked, hits, r, present, left_out)
    here: list[Msg] = []
    elsewhere: list[Msg] = []
    for _, message_id, key in hits:
        messages = world.threads[key].messages
        i = next(j for j, m in enumerate(messages) if m.id == message_id)
        for m in messages[max(0, i - r.before) : i + r.after + 1]:
            if m.id in present:
                continue
            target = here if key == (turn.resource_id, turn.thread_id) else elsewhere
            if m not in target:
                target.append(m)
    return here, elsewhere, ambiguous


def _close(candidates: Sequence[tuple[float, str, Any]], hits: Sequence[Any], r: Recall) -> bool:
    """Whether float32 rounding could change the hits: a score within 1e-5 of the threshold, or of
    the first score left out."""
    eps = 1e-5
    if r.threshold is not None and any(abs(c[0] - r.threshold) < eps for c in candidates):
        return True
    if hits and len(candidates) > len(hits):
        return abs(hits[-1][0] - candidates[len(hits)][0]) < eps
    return False


def memory_search(
    world: World, config: Config, turn: Turn, args: Any, in_prompt: Collection[str], embed: Any
) -> Searched:
    """DESIGN §9, `search_memory(query, scope)`: scoped like recall. Only the turn's resource; scope
    "thread" only this thread; the agent's recall scope (not a call's override) is the widest a
    model may ask for, and a wider ask is refused; recall's threshold; never a message already in
    the prompt (`in_prompt`); the `top_k` closest embedded messages, best first."""
    widest = config.search_scope
    scope = args.get("scope") or widest
    if scope == "resource" and widest == "thread":
        return Searched(scope, refused=True)
    threshold = config.recall.threshold if config.recall is not None else None
    left_out = world.left_out(turn, scope)
    ranked = _ranked(world, turn, scope, embed(args["query"]), embed)
    candidates = [c for c in ranked if c[1] not in in_prompt and c[2] not in left_out]
    above = [c for c in candidates if threshold is None or c[0] >= threshold]
    hits = above[: config.search_top_k or 0]
    bounds = Recall(config.search_top_k or 0, 0, 0, scope, threshold)
    return Searched(
        scope,
        hits=tuple((message_id, key[1], round(score, 4)) for score, message_id, key in hits),
        ambiguous=_close(candidates, hits, bounds)
        or _order_or_rounding_unclear(hits)
        or _overfetch_short(ranked, hits, bounds, in_prompt, left_out),
    )


def _ranked(
    world: World, turn: Turn, scope: str, q: Sequence[float], embed: Any
) -> list[tuple[float, str, tuple[str, str]]]:
    """Every embedded message of the turn's resource in `scope`, closest first (ties by id)."""
    ranked = []
    for key, thread in world.threads.items():
        resource_id, thread_id = key
        if resource_id != turn.resource_id or (scope == "thread" and thread_id != turn.thread_id):
            continue
        for m in thread.messages:
            if m.embedded:
                ranked.append((cosine(q, embed(m.text)), m.id or "", key))
    ranked.sort(key=lambda c: (-c[0], c[1]))
    return ranked


def _overfetch_short(
    ranked: Sequence[tuple[float, str, Any]],
    hits: Sequence[tuple[float, str, Any]],
    r: Recall,
    present: Collection[str],
    left_out: Collection[Any],
) -> bool:
    """Whether memproc's documented shortcut may return fewer hits: with archived threads to leave
    out, it drops them from a search of (top_k + present) x 4 (ARCHIVED_OVERFETCH) results, so a
    hit ranked past that is not found. The reference does not decide those examples."""
    if not left_out or not hits:
        return False
    above = [c for c in ranked if r.threshold is None or c[0] >= r.threshold]
    fetched = 4 * (r.top_k + sum(1 for c in above if c[1] in present))
    return above.index(hits[-1]) >= fetched


def _order_or_rounding_unclear(hits: Sequence[tuple[float, str, str]]) -> bool:
    """Whether float32 rounding could reorder two hits or change a score's fourth decimal."""
    eps = 1e-5
    if any(abs(a[0] - b[0]) < eps for a, b in zip(hits, hits[1:], strict=False)):
        return True
    return any(abs((h[0] * 1e4) % 1 - 0.5) < 1e-2 for h in hits)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


# --- working memory ---------------------------------------------------------------------------------


def working_memory_shown(world: World, cfg: Config, turn: Turn) -> str | None:
    """The data the working-memory system message shows: the scope's value ("" before the first
    update; the message then shows the template or `{}`)."""
    if cfg.working_memory is None:
        return None
    if cfg.working_memory == "resource":
        return world.resource_memory.get(turn.resource_id, "")
    thread = world.thread(turn.resource_id, turn.thread_id)
    return thread.working_memory if thread else ""


def merge_working_memory(current: str, update: Any, *, schema: bool) -> str:
    """Rule 15: Markdown replaces the whole text; schema mode deep-merges (objects merge, null
    deletes a key, arrays and scalars replace)."""
    if not schema:
        return update
    merged = _deep_merge(json.loads(current) if current else {}, _thaw(update))
    return json.dumps(merged, sort_keys=True)


def _deep_merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for key, value in new.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        elif isinstance(value, dict):
            out[key] = _deep_merge({}, value)
        else:
            out[key] = value
    return out


def _thaw(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value
