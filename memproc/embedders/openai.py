"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, LM Studio)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from memproc.conf import settings
from memproc.exceptions import ConfigurationError, EmbedderUnavailable, ValidationError

# Statuses worth a retry later: the request may succeed unchanged.
TRANSIENT_STATUSES = frozenset({408, 409, 429})


class OpenAIEmbedder:
    """Batched embeddings through the openai SDK; vectors come back L2-normalised float32.

    The SDK does not retry (`max_retries=0`): transient failures (connection, timeout, 429, 5xx)
    raise `EmbedderUnavailable` so the background task retries with backoff instead of blocking.
    `api_key`/`base_url` default to `MEMPROC["MODELS"]["openai"]`, then to the SDK's environment
    variables. Without `dimensions`, the size is learnt from the first response.
    """

    def __init__(
        self,
        *,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        batch_size: int = 256,
        timeout: float = 30.0,
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIEmbedder(model=...) is required")
        if dimensions is not None and dimensions <= 0:
            raise ConfigurationError("OpenAIEmbedder(dimensions=...) must be positive")
        if batch_size <= 0:
            raise ConfigurationError("OpenAIEmbedder(batch_size=...) must be positive")
        if timeout <= 0:
            raise ConfigurationError("OpenAIEmbedder(timeout=...) must be positive")
        self.model = model
        self.id = f"openai/{model}"
        self.api_key = api_key
        self.base_url = base_url
        self.batch_size = batch_size
        self.timeout = timeout
        self._requested_dimensions = dimensions
        self._dimensions = dimensions
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """The vector size; asks the endpoint once (one short text) when neither given nor seen yet."""
        if self._dimensions is None:
            self.embed(["dimensions"])
        assert self._dimensions is not None
        return self._dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(texts[start : start + self.batch_size]))
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        import openai

        options: dict[str, Any] = {}
        if self._requested_dimensions is not None:
            options["dimensions"] = self._requested_dimensions
        # The API refuses empty strings; a space embeds as "nothing" just as well.
        inputs = [text if text.strip() else " " for text in texts]
        try:
            response = self.client().embeddings.create(
                model=self.model, input=inputs, encoding_format="float", **options
            )
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
            raise EmbedderUnavailable(f"{self.id}: {exc}") from exc
        except openai.APIStatusError as exc:
            raise _permanent_error(self.id, exc) from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise EmbedderUnavailable(f"{self.id}: {len(data)} vectors for {len(texts)} texts")
        matrix = np.asarray([item.embedding for item in data], dtype=np.float32)
        self._check_dimensions(matrix.shape[1])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return (matrix / np.clip(norms, 1e-12, None)).tolist()

    def _check_dimensions(self, size: int) -> None:
        if self._dimensions is None:
            self._dimensions = size
        elif size != self._dimensions:
            raise ConfigurationError(f"{self.id} returned {size}-d vectors, expected {self._dimensions}")

    def client(self) -> Any:
        """The SDK client, built on first use (the import is lazy: `openai` is an optional extra)."""
        with self._lock:
            if self._client is None:
                self._client = self._build_client()
        return self._client

    def _build_client(self) -> Any:
        try:
            import openai
        except ImportError as exc:
            raise ConfigurationError(
                'OpenAIEmbedder needs the openai SDK: pip install "memproc[openai]"'
            ) from exc
        provider = (settings.MODELS or {}).get("openai", {})
        try:
            return openai.OpenAI(
                api_key=self.api_key or provider.get("api_key"),
                base_url=self.base_url or provider.get("base_url"),
                timeout=self.timeout,
                max_retries=0,
            )
        except openai.OpenAIError as exc:  # no key anywhere
            raise ConfigurationError(f"{self.id}: {exc}") from exc


def _permanent_error(embedder_id: str, exc: Any) -> Exception:
    status = getattr(exc, "status_code", 0)
    message = f"{embedder_id}: HTTP {status}: {exc}"
    if status in TRANSIENT_STATUSES or status >= 500:
        return EmbedderUnavailable(message)
    if status in (401, 403, 404):  # bad key, no access, unknown model or wrong base_url
        return ConfigurationError(message)
    return ValidationError(message)
