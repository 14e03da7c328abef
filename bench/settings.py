"""Settings for benchmark runs: memproc alone, DEBUG off, the database from the environment."""

import os

SECRET_KEY = "bench"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "memproc"]
# The demo site's embedded default: WAL journal, synchronous=NORMAL (durable at checkpoints, no fsync
# per commit), IMMEDIATE transactions so concurrent writers queue instead of failing.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_SQLITE", ":memory:"),
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MEMPROC = {
    "EMBEDDER": {"CLASS": "memproc.testing.HashEmbedder", "OPTIONS": {"dimensions": 384}},
    "BACKGROUND": "inline",
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
