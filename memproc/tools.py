"""Tools the model may call: `Tool` objects and the `@tool` decorator that derives a JSON schema."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, get_args, get_origin

import jsonschema
from asgiref.sync import async_to_sync

from memproc.exceptions import ConfigurationError, ToolError
from memproc.llm.types import ToolSpec

# The working-memory tool's name, and the Markdown document it starts from (Mastra's default
# template). Here, with the value types, so the local model and the WorkingMemory processor agree.
WORKING_MEMORY_TOOL = "updateWorkingMemory"
# The memory search tool (`Memory(search_tool=True)`); guardrails screen its results as recall.
SEARCH_MEMORY_TOOL = "search_memory"
DEFAULT_WORKING_MEMORY_TEMPLATE = """# User Information
- **First Name**:
- **Last Name**:
- **Location**:
- **Occupation**:
- **Interests**:
- **Goals**:
- **Events**:
- **Facts**:
- **Projects**:"""

# How long a call of an approval-gated tool waits for a decision before it is rejected as expired.
DEFAULT_APPROVAL_TIMEOUT = 24 * 60 * 60  # seconds

# What `requires_approval=True` asks of a decider: the permission to change a PendingToolCall.
APPROVAL_PERMISSION = "memproc.change_pendingtoolcall"

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_validator(schema: Mapping[str, Any], *, check: bool = True) -> Any:
    """A validator for `schema`; with `check`, the schema is first checked against its metaschema
    (jsonschema.SchemaError). That check costs ~2 ms, forty times a validation: a tool is built once
    and keeps its validator, and memproc's own per-turn tools skip it (`Tool.schema_checked`)."""
    cls = jsonschema.validators.validator_for(schema)
    if check:
        cls.check_schema(schema)
    return cls(schema)


@dataclass
class ToolContext:
    """What a tool that asks for a `context` parameter receives."""

    thread_id: str | None
    resource_id: str | None
    agent: Any
    turn: Any = None


@dataclass
class Tool:
    """A function the model may call. `parameters` is a JSON schema of its keyword arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    # None: a client-side tool, answered by the caller (the turn suspends until it is).
    execute: Callable[..., Any] | None
    wants_context: bool = False
    # Calls of tools marked internal (working memory) are never saved to history.
    internal: bool = False
    # A schema a test has checked (memproc's own constants): the tool is rebuilt every turn, and the
    # metaschema check (~2 ms) was a third of a W3 turn's memory work.
    schema_checked: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    # A call waits for a person: True (the permission APPROVAL_PERMISSION), a Django permission
    # "app_label.codename", or a callable (user, pending) -> bool. False: the call runs at once.
    requires_approval: bool | str | Callable[[Any, Any], bool] = False
    # Seconds a waiting call may wait before it is rejected as expired; None: it never expires.
    approval_timeout: float | None = DEFAULT_APPROVAL_TIMEOUT
    # A JSON schema of the result a caller submits for a client-side tool (checked when it answers);
    # None: any JSON value.
    output_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise ConfigurationError(f"Tool name {self.name!r} must be letters, digits, '_' or '-'")
        if self.parameters.get("type") != "object":
            raise ConfigurationError(f"Tool {self.name!r}: parameters must be a JSON schema of type object")
        if self.execute is not None and not callable(self.execute):
            raise ConfigurationError(f"Tool {self.name!r}: execute must be callable, or None (client-side)")
        approval = self.requires_approval
        if isinstance(approval, str):
            app, dot, codename = approval.partition(".")
            if not (app and dot and codename) or " " in approval:
                raise ConfigurationError(
                    f"Tool {self.name!r}: requires_approval={approval!r} must name a permission as "
                    "'app_label.codename'"
                )
        elif not isinstance(approval, bool) and not callable(approval):
            raise ConfigurationError(
                f"Tool {self.name!r}: requires_approval must be True, False, a permission "
                f"'app_label.codename' or a callable (user, pending) -> bool, not {approval!r}"
            )
        if approval is not False and self.execute is None:
            raise ConfigurationError(
                f"Tool {self.name!r}: a client-side tool (no function) is answered by the caller; "
                "it cannot also require approval"
            )
        if self.output_schema is not None:
            if self.execute is not None:
                raise ConfigurationError(
                    f"Tool {self.name!r}: output_schema describes a client-side tool's answer; "
                    "a tool with a function returns what it returns"
                )
            try:
                self.output_validator  # noqa: B018 - built now, so a bad schema fails at definition
            except (TypeError, AttributeError, jsonschema.SchemaError) as exc:
                raise ConfigurationError(
                    f"Tool {self.name!r}: output_schema must be a valid JSON schema "
                    f"({getattr(exc, 'message', exc)})"
                ) from exc
        timeout = self.approval_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise ConfigurationError(
                f"Tool {self.name!r}: approval_timeout must be a positive number or None"
            )

    @property
    def waits(self) -> str | None:
        """What a call of this tool waits for: "approval", "client" (no function), or None."""
        if self.execute is None:
            return "client"
        return "approval" if self.requires_approval is not False else None

    @property
    def approval_permission(self) -> str:
        """The Django permission a decider needs; "" when a callable decides."""
        if self.requires_approval is True:
            return APPROVAL_PERMISSION
        return self.requires_approval if isinstance(self.requires_approval, str) else ""

    def validate(self, args: Mapping[str, Any]) -> None:
        """Checks `args` against the schema: ToolError with the first problem."""
        try:
            self.validator.validate(dict(args))
        except jsonschema.ValidationError as exc:
            raise ToolError(f"Invalid arguments for {self.name}: {exc.message}") from exc

    @cached_property
    def validator(self) -> Any:
        return schema_validator(self.parameters, check=not self.schema_checked)

    def validate_output(self, result: Any) -> None:
        """Checks a result against `output_schema` (none: anything passes): ToolError with the first
        problem."""
        if self.output_schema is None:
            return
        try:
            self.output_validator.validate(result)
        except jsonschema.ValidationError as exc:
            raise ToolError(f"Invalid result for {self.name}: {exc.message}") from exc

    @cached_property
    def output_validator(self) -> Any:
        return schema_validator(self.output_schema or {})

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def run(self, args: Mapping[str, Any], context: ToolContext) -> Any:
        """Validates `args` against the schema and calls the function; bad args raise ToolError."""
        self.validate(args)
        if self.execute is None:
            raise ToolError(f"{self.name} is a client-side tool: the caller answers it")
        kwargs = dict(args)
        if self.wants_context:
            kwargs["context"] = context
        result = self.execute(**kwargs)
        if inspect.isawaitable(result):

            async def _await() -> Any:
                return await result

            result = async_to_sync(_await)()
        return result


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool | str | Callable[[Any, Any], bool] = False,
    approval_timeout: float | None = DEFAULT_APPROVAL_TIMEOUT,
) -> Any:
    """Makes a Tool from a function; the schema comes from its type hints, the description from its
    docstring. A parameter named `context` receives a ToolContext and is not shown to the model.

    `requires_approval` makes a call wait for a person (memproc.services.approvals): True needs
    the permission `memproc.change_pendingtoolcall`, a string names the Django permission needed, a
    callable `(user, pending) -> bool` decides who may. A waiting call expires after
    `approval_timeout` seconds (None: never)."""

    def build(func: Callable[..., Any]) -> Tool:
        params, wants_context = schema_for(func)
        return Tool(
            name=name or func.__name__,
            description=description or inspect.getdoc(func) or "",
            parameters=params,
            execute=func,
            wants_context=wants_context,
            requires_approval=requires_approval,
            approval_timeout=approval_timeout,
        )

    return build(fn) if fn is not None else build


def schema_for(func: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    hints = typing.get_type_hints(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    wants_context = False
    for param in inspect.signature(func).parameters.values():
        if param.name == "context":
            wants_context = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"@tool {func.__name__}: *args/**kwargs cannot be described")
        properties[param.name] = json_schema_of(hints.get(param.name, Any))
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            properties[param.name]["default"] = param.default
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema, wants_context


def json_schema_of(hint: Any) -> dict[str, Any]:
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            inner = json_schema_of(non_null[0])
            return {"anyOf": [inner, {"type": "null"}]} if len(non_null) < len(args) else inner
        return {"anyOf": [json_schema_of(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple):
        return {"type": "array", "items": json_schema_of(args[0]) if args else {}}
    if origin is dict or hint is dict:
        return {"type": "object"}
    return {}
