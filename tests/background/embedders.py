"""Embedders for the background tests: one that fails on demand, one reachable by dotted path."""

from __future__ import annotations

from typing import ClassVar

from memproc.exceptions import EmbedderUnavailable
from memproc.testing import HashEmbedder


class FlakyEmbedder(HashEmbedder):
    """A HashEmbedder whose next `fail_next` calls raise `error` (default: EmbedderUnavailable)."""

    def __init__(self, *, dimensions: int = 64, id: str = "flaky-64") -> None:
        super().__init__(dimensions=dimensions)
        self.id = id
        self.fail_next = 0
        self.error: BaseException = EmbedderUnavailable("the embeddings endpoint is down")
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail_next:
            self.fail_next -= 1
            raise self.error
        return super().embed(texts)


class SwitchEmbedder(HashEmbedder):
    """The embedder a resource moves to (`tests.background.embedders.SwitchEmbedder`): 32-d, its own id.

    Built by dotted path, so its bookkeeping is on the class: `batches` records the size of each call,
    and call number `fail_on_call` (1-based) raises `failure`.
    """

    batches: ClassVar[list[int]] = []
    fail_on_call: ClassVar[int | None] = None
    failure: ClassVar[type[BaseException]] = KeyboardInterrupt

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.id = "switch-32"

    def embed(self, texts: list[str]) -> list[list[float]]:
        cls = type(self)
        cls.batches.append(len(texts))
        if cls.fail_on_call is not None and len(cls.batches) == cls.fail_on_call:
            raise cls.failure()
        return super().embed(texts)

    @classmethod
    def reset(cls) -> None:
        cls.batches = []
        cls.fail_on_call = None
        cls.failure = KeyboardInterrupt
