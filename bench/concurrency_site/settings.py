"""Settings of the concurrency benchmark's site: DEBUG off, memproc's API with Basic auth.

The benchmark (bench/concurrency.py) sets these environment variables for every process it starts
(the setup command, uvicorn, gunicorn):

- BENCH_MODEL_URL: the loopback OpenAI-compatible server's base URL (`http://127.0.0.1:PORT/v1`);
- BENCH_SQLITE: the SQLite file, or BENCH_PG_HOST / BENCH_PG_PORT: the embedded PostgreSQL's socket
  dir and port (bench/settings.py's variables, so both benchmarks configure databases the same way);
- BENCH_PG_POOL: on PostgreSQL, the max_size of Django's connection pool (needs psycopg-pool); unset
  or 0, no pool.

CONN_MAX_AGE is 0 on purpose: every request and every blocking step of an async turn opens and
closes its own connection, which is what makes "N turns in flight" differ from "N connections held".
"""

import os

from bench.settings import DATABASES as _BENCH_DATABASES

SECRET_KEY = "bench-concurrency"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "bench.concurrency_site.urls"
ASGI_APPLICATION = "bench.concurrency_site.asgi.application"
WSGI_APPLICATION = "bench.concurrency_site.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "rest_framework",
    "memproc",
    "bench.concurrency_site",
]
# The demo site's stack, minus the pieces for HTML pages (messages, clickjacking).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]

# SQLite: WAL, synchronous=NORMAL, IMMEDIATE transactions (bench/settings.py, the demo's default);
# PostgreSQL when BENCH_PG_HOST is set. Either way CONN_MAX_AGE 0 (see the docstring).
DATABASES = {"default": {**_BENCH_DATABASES["default"], "CONN_MAX_AGE": 0}}
if os.environ.get("BENCH_PG_HOST") and int(os.environ.get("BENCH_PG_POOL") or 0):
    # A bounded pool: a request waits for a free connection instead of failing with "too many clients".
    pool = {"min_size": 2, "max_size": int(os.environ["BENCH_PG_POOL"]), "timeout": 60}
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}), "pool": pool}

# Basic auth re-checks the password on every request. Django's default PBKDF2 costs 0.77 s of CPU
# per check on the benchmark machine, by design; 100 requests would measure the hasher, not the turns
# (a real client logs in once and sends a session cookie or a token).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],  # no templates here
    # memproc's per-user throttle (600/minute by default) off: one user sends every turn of a run.
    "DEFAULT_THROTTLE_RATES": {"memproc": None},
}

MEMPROC = {
    "EMBEDDER": {"CLASS": "memproc.testing.HashEmbedder", "OPTIONS": {"dimensions": 384}},
    "BACKGROUND": "inline",
}

# Warnings and errors only, on stderr (the benchmark keeps the server's stderr in its temp folder).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")},
}
