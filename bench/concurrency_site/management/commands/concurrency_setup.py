"""`concurrency_setup`: the benchmark's database, migrated, with the user its client logs in as."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Migrates the benchmark's database and creates (or resets) its client's user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="bench")
        parser.add_argument("--password", default="bench")

    def handle(self, *args: Any, username: str, password: str, **options: Any) -> None:
        call_command("migrate", verbosity=0, interactive=False)
        # A plain user, not staff: it owns one resource (its pk), as a chat app's user does.
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
