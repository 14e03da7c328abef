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
from memproc.processors.memory_search import MemorySearch
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
# The search tool's own option; its scope, threshold and archived threads are recall's (narrower only).
SEARCH_TOOL_DEFAULTS = {"top_k": 5, "scope": None, "threshold": None, "include_archived": None}
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
        search_tool: bool | dict[str, Any] = False,
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
        self.search_options = _search_options(
            _options(search_tool, SEARCH_TOOL_DEFAULTS, "search_tool"), self.recall_options
        )
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
                search_tool=_narrowed(self.search_options, options.get("semantic_recall")),
            )
        except ConfigurationError as exc:
            raise ValidationError(f"memory_options: {exc}") from exc

    @property
    def uses_semantic_recall(self) -> bool:
        return self.recall_options is not None

    @property
    def embeds_messages(self) -> bool:
        """Whether saved messages are embedded: semantic recall or the search tool searches them."""
        return self.recall_options is not None or self.search_options is not None

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
        if self.search_options:
            built["memory-search"] = MemorySearch(
                embedder=self.embedder, vector_store=self.vector_store, **self.search_options
            )
        return built

    def processors(self) -> tuple[list[Any], list[Any]]:
        """(input, output) memory processors in pipeline order (DESIGN §2 rules 1-2)."""
        p = self._processors
        order_in = [
            "attachment-uploader",
            "working-memory",
            "message-history",
            "semantic-recall",
            "memory-search",
        ]
        # SemanticRecall asks for the turn's embeddings; without it the search tool does.
        order_out = ["semantic-recall" if "semantic-recall" in p else "memory-search", "message-history"]
        return [p[i] for i in order_in if i in p], [p[i] for i in order_out if i in p]

    @property
    def working_memory_processor(self) -> Any:
        return self._processors.get("working-memory")


def _search_options(options: dict[str, Any] | None, recall: dict[str, Any] | None) -> dict[str, Any] | None:
    """The search tool's options: `top_k`, and recall's scope, threshold and archived threads, which
    the tool may narrow but never widen (with recall off: recall's defaults, or as given)."""
    if options is None:
        return None
    top_k = options["top_k"]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigurationError("Memory(search_tool={'top_k': ...}) must be an integer >= 1")
    bounds = recall or RECALL_DEFAULTS
    scope = options["scope"] or bounds["scope"]
    if scope not in ("resource", "thread"):
        raise ConfigurationError("Memory(search_tool={'scope': ...}) must be 'resource' or 'thread'")
    if recall is not None and scope == "resource" and bounds["scope"] == "thread":
        raise ConfigurationError(
            "Memory(search_tool={'scope': 'resource'}) is wider than semantic_recall's scope 'thread'"
        )
    include_archived = options["include_archived"]
    if include_archived is None:
        include_archived = bounds["include_archived"]
    if not isinstance(include_archived, bool):
        raise ConfigurationError("Memory(search_tool={'include_archived': ...}) must be True or False")
    if recall is not None and include_archived and not bounds["include_archived"]:
        raise ConfigurationError(
            "Memory(search_tool={'include_archived': True}) is wider than semantic_recall, which leaves "
            "archived threads out"
        )
    threshold = options["threshold"] if options["threshold"] is not None else bounds["threshold"]
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, int | float) or not -1.0 <= threshold <= 1.0
    ):
        raise ConfigurationError("Memory(search_tool={'threshold': ...}) is a cosine similarity in [-1, 1]")
    return {"top_k": top_k, "scope": scope, "threshold": threshold, "include_archived": include_archived}


def _narrowed(search: dict[str, Any] | None, recall: Any) -> dict[str, Any] | bool:
    """The search tool's options for a call whose `semantic_recall` override may narrow recall: the
    tool never searches wider than the call's recall (nor than the agent's, whatever the call)."""
    if search is None:
        return False
    if isinstance(recall, dict) and recall.get("enabled", True) is not False:
        narrower = dict(search)
        if recall.get("scope") == "thread":
            narrower["scope"] = "thread"
        if recall.get("include_archived") is False:
            narrower["include_archived"] = False
        return narrower
    return dict(search)


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
