"""Memory, the configuration: which memory an agent has, and the memory processors that gives it.

The API over stored data that Memory also offers lives beside it, in `thread_data` (threads, working
memory, summaries, export) and `message_data` (saving, recalling, editing and deleting messages).
"""

from __future__ import annotations

from typing import Any

from memproc.exceptions import ConfigurationError, ValidationError
from memproc.memory.message_data import MessageDataMixin
from memproc.memory.thread_data import ThreadDataMixin
from memproc.processors.attachments import AttachmentUploader
from memproc.processors.compaction import CompactionOptions
from memproc.processors.message_history import MessageHistory
from memproc.processors.semantic_recall import SemanticRecall
from memproc.processors.working_memory import WorkingMemory

RECALL_DEFAULTS = {
    "top_k": 4,
    "message_range": 1,
    "scope": "resource",
    "threshold": None,
    "include_archived": False,
}
WORKING_MEMORY_DEFAULTS = {"scope": "resource", "template": None, "schema": None, "max_tokens": None}
COMPACTION_DEFAULTS = {"trigger_tokens": 6000, "keep_tokens": 2000, "model": None}
CALL_OPTIONS = frozenset({"read_only", "last_messages", "semantic_recall", "working_memory"})


class Memory(ThreadDataMixin, MessageDataMixin):
    """Which memory an agent has (history, semantic recall, working memory) and the programmatic API
    over threads, messages and working memory. Defaults follow Mastra's."""

    def __init__(
        self,
        *,
        last_messages: int | bool = 10,
        semantic_recall: bool | dict[str, Any] = False,
        working_memory: bool | dict[str, Any] = False,
        embedder: Any = None,
        vector_store: Any = None,
        generate_title: bool = False,
        read_only: bool = False,
        history_tokens: int | None = None,
        compaction: bool | dict[str, Any] = False,
    ) -> None:
        if last_messages is True or (
            not isinstance(last_messages, bool) and (not isinstance(last_messages, int) or last_messages < 0)
        ):
            raise ConfigurationError("Memory(last_messages=...) must be an integer >= 0 or False")
        if history_tokens is not None and (
            isinstance(history_tokens, bool) or not isinstance(history_tokens, int) or history_tokens <= 0
        ):
            raise ConfigurationError("Memory(history_tokens=...) must be a positive integer or None")
        self.last_messages = last_messages
        self.history_tokens = history_tokens
        self.recall_options = _options(semantic_recall, RECALL_DEFAULTS, "semantic_recall")
        self.working_memory_options = _options(working_memory, WORKING_MEMORY_DEFAULTS, "working_memory")
        self.compaction_options = _options(compaction, COMPACTION_DEFAULTS, "compaction")
        if self.compaction_options is not None and last_messages is False:
            raise ConfigurationError("Memory(compaction=...) needs history: last_messages cannot be False")
        self.embedder = embedder
        self.vector_store = vector_store
        self.generate_title = generate_title
        self.read_only = read_only
        self._importing = False
        self._processors = self._build_processors()

    def with_options(self, options: dict[str, Any]) -> Memory:
        """This Memory with one call's overrides (rule 22): `read_only`, `last_messages`,
        `semantic_recall` and `working_memory` (a dict merges into this Memory's options)."""
        if not isinstance(options, dict):
            raise ValidationError("memory_options must be a dict")
        unknown = set(options) - CALL_OPTIONS
        if unknown:
            raise ValidationError(
                f"memory_options has unknown keys: {', '.join(sorted(unknown))}; "
                f"expected some of {', '.join(sorted(CALL_OPTIONS))}"
            )
        try:
            return Memory(
                last_messages=options.get("last_messages", self.last_messages),
                semantic_recall=_merged(options, "semantic_recall", self.recall_options),
                working_memory=_merged(options, "working_memory", self.working_memory_options),
                embedder=self.embedder,
                vector_store=self.vector_store,
                generate_title=self.generate_title,
                read_only=bool(options.get("read_only", self.read_only)),
                history_tokens=self.history_tokens,
                compaction=self.compaction_options or False,
            )
        except ConfigurationError as exc:
            raise ValidationError(f"memory_options: {exc}") from exc

    @property
    def uses_semantic_recall(self) -> bool:
        return self.recall_options is not None

    def _build_processors(self) -> dict[str, Any]:

        built: dict[str, Any] = {}
        if self.last_messages is not False and not self.read_only:
            # Only memory that saves messages needs files offloaded: a stored message never holds bytes.
            built["attachment-uploader"] = AttachmentUploader()
        if self.working_memory_options:
            wm = self.working_memory_options
            built["working-memory"] = WorkingMemory(
                scope=wm["scope"],
                template=wm.get("template"),
                schema=wm.get("schema"),
                max_tokens=wm.get("max_tokens"),
                read_only=self.read_only,
            )
        if self.last_messages is not False:
            built["message-history"] = MessageHistory(
                int(self.last_messages),
                history_tokens=self.history_tokens,
                compaction=CompactionOptions.of(self.compaction_options),
                read_only=self.read_only,
            )
        if self.recall_options:
            built["semantic-recall"] = SemanticRecall(
                embedder=self.embedder, vector_store=self.vector_store, **self.recall_options
            )
        return built

    def processors(self) -> tuple[list[Any], list[Any]]:
        """(input, output) memory processors in pipeline order (DESIGN §2 rules 1-2)."""
        p = self._processors
        order_in = ["attachment-uploader", "working-memory", "message-history", "semantic-recall"]
        order_out = ["semantic-recall", "message-history"]
        return [p[i] for i in order_in if i in p], [p[i] for i in order_out if i in p]

    @property
    def working_memory_processor(self) -> Any:
        return self._processors.get("working-memory")


def _merged(options: dict[str, Any], name: str, current: dict[str, Any] | None) -> Any:
    """A call's override of one option: True/False/None as given; a dict merges into the current."""
    if name not in options:
        return current or False
    value = options[name]
    if isinstance(value, dict) and value.get("enabled", True) is not False:
        return {**(current or {}), **value}
    return value


def _options(value: bool | dict[str, Any], defaults: dict[str, Any], name: str) -> dict[str, Any] | None:
    """True, False, None or a dict of options; the seed's `{"enabled": bool, ...}` form too (rule 21)."""
    if value is False or value is None:
        return None
    if value is True:
        return dict(defaults)
    if isinstance(value, dict):
        enabled = value.get("enabled", True)
        if not isinstance(enabled, bool):
            raise ConfigurationError(f"Memory({name}={{'enabled': ...}}) must be True or False")
        if not enabled:
            return None
        value = {k: v for k, v in value.items() if k != "enabled"}
        unknown = set(value) - set(defaults)
        if unknown:
            raise ConfigurationError(f"Memory({name}=...) has unknown options: {', '.join(sorted(unknown))}")
        return {**defaults, **value}
    raise ConfigurationError(f"Memory({name}=...) must be True, False or a dict")
