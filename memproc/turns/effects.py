"""What a turn's engine asks its driver to do: the effects `TurnEngine.run()` yields.

The engine does no I/O of its own; for every step that may block (the database, files, tools, user
hooks) or wait (the model) it yields one of these and receives the result back. The sync driver
(memproc.turns.sync) performs them in the calling thread; the async one
(memproc.turns.aio) awaits the model and runs blocking steps in worker threads.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from memproc.events import StreamEvent
from memproc.llm.types import ModelRequest

__all__ = [
    "Blocking",
    "Effect",
    "EngineStep",
    "ModelGenerate",
    "ModelStreamClose",
    "ModelStreamNext",
    "ModelStreamOpen",
]


@dataclass(frozen=True, slots=True)
class Blocking:
    """A step that may block: the sync driver calls it, the async driver runs it in a worker thread."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelGenerate:
    model: Any
    request: ModelRequest


@dataclass(frozen=True, slots=True)
class ModelStreamOpen:
    """Starts the model's stream; the driver answers with a handle for `ModelStreamNext`."""

    model: Any
    request: ModelRequest


@dataclass(frozen=True, slots=True)
class ModelStreamNext:
    """The stream's next event, or None at its end."""

    handle: Any


@dataclass(frozen=True, slots=True)
class ModelStreamClose:
    handle: Any


Effect = Blocking | ModelGenerate | ModelStreamOpen | ModelStreamNext | ModelStreamClose
EngineStep = Generator[StreamEvent | Effect, Any, Any]
