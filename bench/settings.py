"""Settings for benchmark runs: memproc alone, DEBUG off, the database from the environment.

The runner and its Celery worker (bench/run.py --background celery) are separate processes reading
these settings; everything that must agree between them comes from environment variables the runner
sets before either loads them:

- BENCH_SQLITE: the SQLite file (default: an in-memory database);
- BENCH_PG_HOST, BENCH_PG_PORT: the embedded PostgreSQL's socket dir and port (instead of SQLite);
  BENCH_PG_NAME: the database on it (default "postgres");
  BENCH_PG_OPTIONS: libpq options for it, e.g. "-c synchronous_commit=off";
- BENCH_BACKGROUND: memproc's BACKGROUND, "inline" (default) or "celery";
- BENCH_REDIS_URL: the Celery broker (default redis://127.0.0.1:6379/13, a database kept for benchmarks);
- BENCH_MEMPROC: JSON merged into MEMPROC, e.g. '{"HNSW_EF_CONSTRUCTION": 64}' to compare settings.
"""

import json
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
if os.environ.get("BENCH_PG_HOST"):
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_PG_NAME", "postgres"),
        "USER": "postgres",
        "HOST": os.environ["BENCH_PG_HOST"],
        "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
    }
    if os.environ.get("BENCH_PG_OPTIONS"):  # e.g. "-c synchronous_commit=off" to see the fsync share
        DATABASES["default"]["OPTIONS"] = {"options": os.environ["BENCH_PG_OPTIONS"]}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MEMPROC = {
    "EMBEDDER": {"CLASS": "memproc.testing.HashEmbedder", "OPTIONS": {"dimensions": 384}},
    "BACKGROUND": os.environ.get("BENCH_BACKGROUND", "inline"),
    # The README's advice for bulk imports: the 50k graph (~90 MB) would not fit the server's 64 MB.
    "HNSW_BUILD_MEMORY": "1GB",
    **json.loads(os.environ.get("BENCH_MEMPROC", "{}")),
}
LOGGING = {"version": 1, "disable_existing_loggers": False}

# Celery (bench/celery_app.py): used only with BENCH_BACKGROUND=celery. Tasks go to Celery's default
# queue, as memproc's tasks name none.
CELERY_BROKER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
