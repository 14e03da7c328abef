"""Signals memproc sends."""

from django.dispatch import Signal

# Sent after a TripwireLog row is written. kwargs: tripwire (events.Tripwire), log (TripwireLog),
# agent_id, thread_id, resource_id.
tripwire_triggered = Signal()
