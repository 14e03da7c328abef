"""An embedder that records the texts it was asked to embed, for tests that count embedder calls."""

from __future__ import annotations

from memproc.testing import HashEmbedder


class CountingEmbedder(HashEmbedder):
    """The hash embedder, recording every text it embeds in `texts`."""

    def __init__(self, id: str = "counting-hash") -> None:
        super().__init__()
        self.id = id
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return super().embed(texts)
