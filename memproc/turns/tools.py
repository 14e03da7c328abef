"""A tool call of the model, run: its result, or the error the model reads instead."""

from __future__ import annotations

import json
import logging
from typing import Any

from memproc import logs
from memproc.exceptions import ToolError, ValidationError
from memproc.llm.types import ToolCall
from memproc.messages import ToolResultPart, thaw
from memproc.processors.turn import Turn
from memproc.tools import ToolContext

__all__ = ["tool_run"]

logger = logging.getLogger(__name__)


def tool_run(call: ToolCall, *, turn: Turn) -> ToolResultPart:
    """Runs one call (a blocking step). A tool's own error (ToolError, ValidationError) is the
    model's to read; any other failure is logged and read as `<type>: <message>`. The tool's context
    names the turn's agent as processors see it (`Turn.agent`)."""
    tool = turn.tools.get(call.name)
    if tool is None:
        return ToolResultPart(call.id, call.name, f"Unknown tool {call.name!r}", is_error=True)
    context = ToolContext(thread_id=turn.thread_id, resource_id=turn.resource_id, agent=turn.agent, turn=turn)
    try:
        result = tool.run(call.args, context)
    except (ToolError, ValidationError) as exc:
        return ToolResultPart(call.id, call.name, str(exc), is_error=True)
    except Exception as exc:
        logs.failure(logger, "memproc: tool %s failed", call.name, extra=logs.current(), exc=exc)
        return ToolResultPart(call.id, call.name, f"{type(exc).__name__}: {exc}", is_error=True)
    return ToolResultPart(call.id, call.name, _jsonable(result))


def _jsonable(value: Any) -> Any:
    value = thaw(value)
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)
