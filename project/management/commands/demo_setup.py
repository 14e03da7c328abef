"""Creates the demo admin login (idempotent) and prints it."""

import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo site's admin login and print it."

    def handle(self, *args, **options):
        username = os.environ.get("DEMO_USERNAME", "admin")
        password = os.environ.get("DEMO_PASSWORD", "memproc-demo")
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
