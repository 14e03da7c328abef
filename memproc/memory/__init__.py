"""Memory: the configuration that adds memory processors to an agent, and the API over stored data.

Import from here (`from memproc.memory import Memory`); the modules are `config` (Memory: its options
and the processors it builds), `thread_data` (its methods over threads, working memory, summaries and
exports) and `message_data` (its methods over messages).
"""

from memproc.memory.config import (
    CALL_OPTIONS,
    COMPACTION_DEFAULTS,
    RECALL_DEFAULTS,
    WORKING_MEMORY_DEFAULTS,
    Memory,
)

__all__ = ["CALL_OPTIONS", "COMPACTION_DEFAULTS", "RECALL_DEFAULTS", "WORKING_MEMORY_DEFAULTS", "Memory"]
