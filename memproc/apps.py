from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MemprocConfig(AppConfig):
    name = "memproc"
    verbose_name = _("Agent memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memproc import checks, signals  # noqa: F401  (registers checks and receivers)
        from memproc.agents.registry import autodiscover

        autodiscover()
