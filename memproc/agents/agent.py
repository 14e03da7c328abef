"""The Agent: instructions, a model, memory, tools and processors; `generate` and `stream` run a turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from memproc.conf import settings
from memproc.events import GenerateResult, StreamEvent
from memproc.exceptions import ConfigurationError, ValidationError
from memproc.llm import resolve_model
from memproc.messages import Message, MessageInput
from memproc.processors.parallel import check_processors
from memproc.processors.runner import build_chains
from memproc.tools import Tool, tool
from memproc.turns.plan import DEFAULT_API_ERROR_RETRIES, TurnPlan
from memproc.turns.stream_policy import StreamPolicy, policy_for

if TYPE_CHECKING:
    from memproc.llm.types import ChatModel
    from memproc.memory import Memory


class Agent:
    """An LLM agent with optional memory.

    Processor order (DESIGN §2): memory processors, then `input_processors`, before the model;
    `output_processors`, then memory processors (which save), after it.

    `stream_policy` says when streamed text reaches the client: "live" (as the model makes it),
    "sentences" (each sentence once the output guardrails screened the text so far) or "hold" (once
    the result guardrails passed); see memproc.turns.stream_policy. By default (None) it is the
    strictest one the output processors declare they need (`needs_stream_policy`), so an agent
    with no such guardrail streams live. A weaker policy than they need would let a blocked reply
    reach the client: it is a ConfigurationError unless `allow_unscreened_stream=True` accepts that.

    `max_processor_retries` bounds the retries of one turn: after an output processor's
    `abort(retry=True)` and after a model error a `process_api_error` hook repaired, counted
    together. Unset (None), output aborts are not retried and API errors up to
    DEFAULT_API_ERROR_RETRIES (3) times.
    """

    def __init__(
        self,
        *,
        id: str,
        instructions: str = "",
        model: str | ChatModel | None = None,
        memory: Memory | None = None,
        tools: Sequence[Tool | Callable[..., Any]] = (),
        input_processors: Sequence[Any] = (),
        output_processors: Sequence[Any] = (),
        max_processor_retries: int | None = None,
        max_steps: int | None = None,
        name: str = "",
        description: str = "",
        stream_policy: StreamPolicy | None = None,
        allow_unscreened_stream: bool = False,
    ) -> None:
        if not id or not isinstance(id, str):
            raise ConfigurationError("Agent(id=...) must be a non-empty string")
        if max_processor_retries is not None and (
            isinstance(max_processor_retries, bool)
            or not isinstance(max_processor_retries, int)
            or max_processor_retries < 0
        ):
            raise ConfigurationError("max_processor_retries must be an integer >= 0 (or None)")
        check_processors([*input_processors, *output_processors], error=ConfigurationError)
        if not isinstance(allow_unscreened_stream, bool):
            raise ConfigurationError("allow_unscreened_stream must be True or False")
        # Memory's own output processors need no policy: the user's are the ones that can refuse one.
        policy_for(output_processors, stream_policy, allow_unscreened=allow_unscreened_stream)
        self.id = id
        self.name = name or id
        self.description = description
        self.instructions = instructions
        self._model_spec = model
        self.memory = memory
        self.tools = [_as_tool(t) for t in tools]
        self.input_processors = list(input_processors)
        self.output_processors = list(output_processors)
        self.max_processor_retries = max_processor_retries
        self._max_steps = max_steps
        self.stream_policy = stream_policy
        self.allow_unscreened_stream = allow_unscreened_stream

    def __repr__(self) -> str:
        return f"<Agent {self.id}>"

    @property
    def model(self) -> ChatModel:
        return resolve_model(self._model_spec)

    @property
    def model_id(self) -> str:
        spec = self._model_spec
        return spec if isinstance(spec, str) else getattr(spec, "id", "") or "default"

    @property
    def model_name(self) -> str | None:
        """The "provider/model" string the agent was given (what a worker can resolve), or None
        when it was given a model object."""
        spec = self._model_spec
        return spec if isinstance(spec, str) else None

    @property
    def max_steps(self) -> int:
        return self._max_steps or settings.MAX_TOOL_STEPS

    def instructions_message(self) -> Message:
        return Message.create("system", self.instructions, id=f"instructions:{self.id}")

    def memory_for(self, memory_options: dict[str, Any] | None = None) -> Memory | None:
        """The agent's Memory, with one call's `memory_options` applied (rule 22)."""
        if not memory_options:
            return self.memory
        if self.memory is None:
            raise ValidationError("memory_options need an agent with memory")
        return self.memory.with_options(memory_options)

    def processor_chains(self, memory_options: dict[str, Any] | None = None) -> tuple[list[Any], list[Any]]:
        return self._chains(self.memory_for(memory_options))

    def _chains(
        self,
        memory: Memory | None,
        input_processors: Sequence[Any] | None = None,
        output_processors: Sequence[Any] | None = None,
    ) -> tuple[list[Any], list[Any]]:
        """Rules 1-3 over the agent's processor lists, or a call's lists in their place."""
        memory_in, memory_out = memory.processors() if memory is not None else ([], [])
        return build_chains(
            memory_input=memory_in,
            memory_output=memory_out,
            user_input=self.input_processors if input_processors is None else input_processors,
            user_output=self.output_processors if output_processors is None else output_processors,
        )

    def plan(
        self,
        *,
        memory_options: dict[str, Any] | None = None,
        max_processor_retries: int | None = None,
        stream_policy: StreamPolicy | None = None,
        input_processors: Sequence[Any] | None = None,
        output_processors: Sequence[Any] | None = None,
    ) -> TurnPlan:
        """This agent compiled for one call, with that call's overrides (rule 22): what the turn's
        code reads instead of the agent. `input_processors` / `output_processors` replace the
        agent's lists for this call (memory's processors stay where memory puts them). Bad
        overrides raise ValidationError here, before the turn."""
        retries = self.max_processor_retries if max_processor_retries is None else max_processor_retries
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValidationError("max_processor_retries must be an integer >= 0")
        for given in (input_processors, output_processors):
            if given is not None:
                if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
                    raise ValidationError("input_processors / output_processors must be lists of processors")
                check_processors(given, error=ValidationError)
        memory = self.memory_for(memory_options or None)
        input_chain, output_chain = self._chains(memory, input_processors, output_processors)
        policy = policy_for(
            output_chain,
            self.stream_policy if stream_policy is None else stream_policy,
            allow_unscreened=self.allow_unscreened_stream,
            error=ValidationError,
        )
        return TurnPlan(
            agent_id=self.id,
            agent_name=self.name,
            model_spec=self._model_spec,
            model_id=self.model_id,
            model_name=self.model_name,
            instructions=self.instructions_message() if self.instructions else None,
            tools=tuple(self.tools),
            input_chain=tuple(input_chain),
            output_chain=tuple(output_chain),
            max_steps=self.max_steps,
            max_processor_retries=retries or 0,
            max_api_error_retries=DEFAULT_API_ERROR_RETRIES if retries is None else retries,
            stream_policy=policy,
            has_memory=memory is not None,
            generate_title=memory.generate_title if memory is not None else False,
            memory_options=dict(memory_options or {}),
            agent=self,
        )

    def generate(
        self,
        messages: MessageInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        memory_options: dict[str, Any] | None = None,
        max_processor_retries: int | None = None,
        input_processors: Sequence[Any] | None = None,
        output_processors: Sequence[Any] | None = None,
    ) -> GenerateResult:
        """Runs one turn. `memory_options` (read_only, last_messages, semantic_recall,
        working_memory), `max_processor_retries` and the processor lists override the agent's for
        this call only."""
        from memproc.turns.sync import turn_run  # the ORM: agents may be defined before setup

        plan = self.plan(
            memory_options=memory_options,
            max_processor_retries=max_processor_retries,
            input_processors=input_processors,
            output_processors=output_processors,
        )
        return turn_run(plan, messages, thread_id=thread_id, resource_id=resource_id)

    def stream(
        self,
        messages: MessageInput,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        memory_options: dict[str, Any] | None = None,
        max_processor_retries: int | None = None,
        stream_policy: StreamPolicy | None = None,
        input_processors: Sequence[Any] | None = None,
        output_processors: Sequence[Any] | None = None,
    ) -> Iterator[StreamEvent]:
        """Runs one turn as stream events; `stream_policy` overrides the agent's for this call (a
        weaker one than its guardrails need raises ValidationError, see the class docstring), as
        do the other options of `generate`."""
        from memproc.turns.sync import turn_events  # the ORM: agents may be defined before setup

        plan = self.plan(
            memory_options=memory_options,
            max_processor_retries=max_processor_retries,
            stream_policy=stream_policy,
            input_processors=input_processors,
            output_processors=output_processors,
        )
        yield from turn_events(plan, messages, thread_id=thread_id, resource_id=resource_id, streaming=True)

    async def agenerate(self, messages: MessageInput, **options: Any) -> GenerateResult:
        """`generate` for async code: concurrent calls overlap (the model is awaited; blocking steps
        run in worker threads that hold a database connection only while they run)."""
        from memproc.turns.aio import turn_events_async  # the ORM: see generate()

        plan = self._plan_from(options)
        box: list[GenerateResult] = []
        async for _ in turn_events_async(plan, messages, result_box=box, **options):
            pass
        return box[0]

    async def astream(self, messages: MessageInput, **options: Any) -> AsyncIterator[StreamEvent]:
        """`stream` for async code; closing the iterator (or cancelling its task) stops the turn
        before it saves."""
        from memproc.turns.aio import turn_events_async  # the ORM: see generate()

        plan = self._plan_from(options)
        events = turn_events_async(plan, messages, streaming=True, **options)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()

    def _plan_from(self, options: dict[str, Any]) -> TurnPlan:
        """The plan for `agenerate`/`astream`'s options; takes its own out, leaving the driver's."""
        return self.plan(
            memory_options=options.pop("memory_options", None),
            max_processor_retries=options.pop("max_processor_retries", None),
            stream_policy=options.pop("stream_policy", None),
            input_processors=options.pop("input_processors", None),
            output_processors=options.pop("output_processors", None),
        )


def _as_tool(value: Any) -> Tool:
    if isinstance(value, Tool):
        return value
    if callable(value):
        return tool(value)
    raise ConfigurationError(f"{value!r} is not a tool")
