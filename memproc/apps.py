from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MemprocConfig(AppConfig):
    name = "memproc"
    verbose_name = _("Agent memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the checks and receivers, and the task bodies inline background work runs.
        from django.conf import settings
        from django.db.models.signals import post_delete

        from memproc import checks, signals, tasks  # noqa: F401
        from memproc.agents.approvals import AgentResumer
        from memproc.agents.registry import autodiscover
        from memproc.services.approvals import connect_resumer
        from memproc.services.user_links import user_deleted

        post_delete.connect(
            user_deleted, sender=settings.AUTH_USER_MODEL, dispatch_uid="memproc.user_deleted"
        )
        connect_resumer(AgentResumer())
        autodiscover()
