"""Creates the demo admin login (idempotent) and prints it."""

import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


def demo_login() -> tuple[str, str]:
    """The demo login this command creates (DEMO_USERNAME / DEMO_PASSWORD); the landing page shows it."""
    return os.environ.get("DEMO_USERNAME", "admin"), os.environ.get("DEMO_PASSWORD", "memproc-demo")


class Command(BaseCommand):
    help = "Create the demo site's admin login and print it."

    def handle(self, *args, **options):
        username, password = demo_login()
        User = get_user_model()
        user, created = User.objects.get_or_create(username=username, defaults={"email": "admin@example.com"})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo login: {username} / {password}  (http://127.0.0.1:{os.environ.get('PORT', '8000')}/)"
            )
        )
        from memproc.agents import all_agents

        for agent in all_agents():
            model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "id", agent.model)
            note = "  (offline stand-in: repeats your message)" if model == "local/echo" else ""
            self.stdout.write(f"Agent {agent.id!r}: model {model}{note}")
