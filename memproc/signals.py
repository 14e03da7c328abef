"""Signals memproc sends, always after the transaction that made the change commits.

Every signal carries `agent_id`, `thread_id` and `resource_id` keyword arguments ("" when a change
has no agent, e.g. an operator's edit), besides its own:

- `tripwire_triggered`: `tripwire` (memproc.events.Tripwire), `log` (TripwireLog).
- `turn_completed`: `result` (GenerateResult), `record_id` (the TurnRecord's id, or None when
  RECORD_TURNS is off). Sent for turns that ran to the end; blocked turns send tripwire_triggered.
- `messages_saved`: `messages` (the saved memproc.messages.Message values, in order).
- `working_memory_updated`: `scope` ("thread" | "resource"), `key`, `version`, `source`
  ("model", "api", "admin", "code"), `text` (the new value).
- `thread_created`: `thread` (memproc.models.Thread).
- `thread_deleted`: nothing else (the row is gone).
- `tool_call_decided`: `pending` (memproc.models.PendingToolCall, as decided), `state` ("approved",
  "rejected" or "expired"), `actor` (the user, or None for code and the expiry job). Sent before
  the turn resumes.
"""

from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from memproc.db import memproc_db

tripwire_triggered = Signal()
turn_completed = Signal()
messages_saved = Signal()
working_memory_updated = Signal()
thread_created = Signal()
thread_deleted = Signal()
tool_call_decided = Signal()


def send_after_commit(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Receivers run once the change is committed (at once outside a transaction); nothing is queued
    when the signal has no receiver."""
    if signal.receivers:
        transaction.on_commit(partial(signal.send, sender=sender, **kwargs), using=memproc_db())
