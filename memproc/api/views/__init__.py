"""memproc's API views: thin interfaces over services (writes) and selectors (reads)."""

from memproc.api.views.agents import AgentViewSet
from memproc.api.views.attachments import AttachmentViewSet
from memproc.api.views.root import ApiRoot
from memproc.api.views.threads import ThreadViewSet
from memproc.api.views.tripwires import TripwireViewSet
from memproc.api.views.working_memory import ResourceWorkingMemoryView

__all__ = [
    "AgentViewSet",
    "ApiRoot",
    "AttachmentViewSet",
    "ResourceWorkingMemoryView",
    "ThreadViewSet",
    "TripwireViewSet",
]
