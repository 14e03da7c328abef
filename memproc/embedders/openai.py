"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, LM Studio)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from memproc import redaction
from memproc.conf import settings
from memproc.embedders.checks import vector_problem
from memproc.exceptions import ConfigurationError, EmbedderUnavailable, ValidationError
from memproc.llm.secret import Secret

logger = logging.getLogger(__name__)

# Statuses worth a retry later: the request may succeed unchanged.
TRANSIENT_STATUSES = frozenset({408, 409, 429})


class OpenAIEmbedder:
    """Batched embeddings through the openai SDK; vectors come back L2-normalised float32.

    The SDK does not retry (`max_retries=0`): transient failures (connection, timeout, 429, 5xx)
    raise `EmbedderUnavailable` so the background task retries with backoff instead of blocking.
    `api_key`/`base_url` default to `MEMPROC["MODELS"]["openai"]`, then to the SDK's environment
    variables. Without `dimensions`, the size is learnt from the first usable response.

    A reply that is not what the API promises (not JSON, no `data`, a vector that is NaN or infinite,
    all zeros, of another size than before, or one vector too few) raises `EmbedderUnavailable` too:
    nothing of it is returned, so nothing of it can be cached or stored. The key is kept as a `Secret`.
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
        self.api_key = Secret(api_key) if api_key else None
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
        # Errors are masked (the key, key-like tokens, URL credentials and, without TRACE_CONTENT,
        # quotes of the texts) and raised without the SDK's exception, whose text is the provider's.
        try:
            response = self.client().embeddings.create(
                model=self.model, input=inputs, encoding_format="float", **options
            )
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
            raise EmbedderUnavailable(f"{self.id}: {self._masked(exc, texts)}") from None
        except openai.APIStatusError as exc:
            raise _permanent_error(self.id, exc, self._masked(exc, texts)) from None
        except (openai.APIError, ValueError) as exc:  # an error event, or a body that is not JSON
            raise EmbedderUnavailable(
                f"{self.id}: unreadable reply: {self._masked(exc, texts)[:300]}"
            ) from None
        matrix = self._matrix(response, len(texts))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not (np.all(np.isfinite(norms)) and np.all(norms > 0)):  # float32 squares over- or underflowed
            norms = np.linalg.norm(matrix.astype(np.float64), axis=1, keepdims=True)
        return (matrix / norms).astype(np.float32).tolist()

    def _matrix(self, response: Any, count: int) -> np.ndarray:
        """The reply's vectors in input order, each checked; EmbedderUnavailable for anything else."""
        data = getattr(response, "data", None) if not isinstance(response, (str, bytes)) else None
        if not isinstance(data, list):
            raise EmbedderUnavailable(f"{self.id}: the reply has no list of embeddings")
        indexes = [getattr(item, "index", None) for item in data]
        if sorted(i for i in indexes if isinstance(i, int)) != list(range(count)) or len(indexes) != count:
            raise EmbedderUnavailable(f"{self.id}: {len(data)} vectors for {count} texts, or indexes askew")
        vectors = [
            getattr(item, "embedding", None)
            for _, item in sorted(zip(indexes, data, strict=True), key=lambda p: p[0])
        ]
        size = self._dimensions
        if size is None:  # learn the size from this reply, but only once it proves usable
            first = vectors[0] if vectors else None
            size = len(first) if isinstance(first, list) else 0
        for index, vector in enumerate(vectors):
            problem = vector_problem(vector, size)
            if problem is not None:
                raise EmbedderUnavailable(f"{self.id}: vector {index} of {count} is {problem}")
        self._dimensions = size
        return np.asarray(vectors, dtype=np.float32).reshape(count, size)

    def _masked(self, exc: BaseException, texts: list[str]) -> str:
        """The provider's error text, for the log: masked (`memproc.redaction.scrub`)."""
        key = self.api_key or _settings_key()
        return redaction.scrub(str(exc), secrets=[key] if key else [], content=texts)

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
                'OpenAIEmbedder needs the openai SDK: pip install "django-memproc[openai]"'
            ) from exc
        key = self.api_key or _settings_key()
        try:
            return openai.OpenAI(
                api_key=key.reveal() if key else None,
                base_url=self.base_url or _provider_settings().get("base_url"),
                timeout=self.timeout,
                max_retries=0,
            )
        except openai.OpenAIError as exc:  # no key anywhere
            raise ConfigurationError(f"{self.id}: {exc}") from exc


def _provider_settings() -> dict[str, Any]:
    provider = (settings.MODELS or {}).get("openai", {})
    return provider if isinstance(provider, dict) else {}


def _settings_key() -> Secret | None:
    key = _provider_settings().get("api_key")
    return Secret(str(key)) if key else None


def _permanent_error(embedder_id: str, exc: Any, said: str) -> Exception:
    status = getattr(exc, "status_code", 0)
    message = f"{embedder_id}: HTTP {status}: {said}"
    if status in TRANSIENT_STATUSES or status >= 500:
        return EmbedderUnavailable(message)
    if status in (401, 403, 404):  # bad key, no access, unknown model or wrong base_url
        return ConfigurationError(message)
    return ValidationError(message)
