"""Settings of the memproc demo site, read from the environment with embedded defaults.

Defaults: a SQLite file, the offline `local/echo` model, the offline MiniLM embedder, background work
inline, attachments on disk. `DATABASE_URL=postgres://...` switches to PostgreSQL (with pgvector),
`MEMPROC_BACKGROUND=celery` plus `CELERY_BROKER_URL` to Celery.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MEMPROC_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)  # the demo's SQLite file and media live here


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).lower() in ("1", "true", "yes", "on")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "memproc-demo-not-secret")
DEBUG = env_bool("DJANGO_DEBUG", True)
ALLOWED_HOSTS = [
    h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "memproc",
    "project",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_from_env() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        import dj_database_url

        return dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    # WAL + synchronous=NORMAL: no fsync per commit (a turn costs ~1 ms instead of ~20 ms);
    # IMMEDIATE transactions make concurrent writers wait for the lock instead of failing.
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "db.sqlite3",
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        },
    }


DATABASES = {"default": database_from_env()}
# On SQLite (no DATABASE_URL) recall searches exactly in process, as the demo intends: the check that
# suggests pgvector for large scopes (shown by `migrate`) would only be noise at the demo's start.
SILENCED_SYSTEM_CHECKS = [] if os.environ.get("DATABASE_URL") else ["memproc.W001"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS: list[dict] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
MEDIA_URL = "media/"
MEDIA_ROOT = VAR_DIR / "media"

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "memproc_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT / "attachments", "base_url": f"/{MEDIA_URL}attachments/"},
    },
}
if os.environ.get("MEMPROC_S3_BUCKET"):  # attachments on S3 (the `s3` extra); credentials from AWS_*
    from botocore.config import Config

    STORAGES["memproc_attachments"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": os.environ["MEMPROC_S3_BUCKET"],
            "endpoint_url": os.environ.get("MEMPROC_S3_ENDPOINT_URL") or None,
            # botocore's defaults (60 s to connect, 60 s per read, five attempts) kept an upload
            # waiting six minutes on an S3 that never answered: a call now fails within 30 s.
            "client_config": Config(
                connect_timeout=5, read_timeout=10, retries={"total_max_attempts": 2, "mode": "standard"}
            ),
        },
    }

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}
SPECTACULAR_SETTINGS = {"TITLE": "memproc API", "VERSION": "0.1.0"}

MEMPROC = {
    "EMBEDDER": os.environ.get("MEMPROC_EMBEDDER", "memproc.embedders.MiniLMEmbedder"),
    "BACKGROUND": os.environ.get("MEMPROC_BACKGROUND", "inline"),
    "MODELS": {
        "openai": {
            "api_key": os.environ.get("OPENAI_API_KEY", ""),
            "base_url": os.environ.get("OPENAI_BASE_URL") or None,
        }
    },
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TASK_IGNORE_RESULT = True
# A broker that accepts connections and never answers must not hold a sender forever.
CELERY_BROKER_CONNECTION_TIMEOUT = 5
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 5}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"memproc": {"handlers": ["console"], "level": os.environ.get("MEMPROC_LOG_LEVEL", "INFO")}},
}
