from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MemprocConfig(AppConfig):
    name = "memproc"
    verbose_name = _("Agent memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the checks and receivers, and the task bodies inline background work runs.
        from memproc import checks, signals, tasks  # noqa: F401
        from memproc.agents.registry import autodiscover

        autodiscover()
