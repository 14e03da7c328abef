"""The site under WSGI: `gunicorn bench.concurrency_site.wsgi:application` (sync or gthread workers)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.concurrency_site.settings")
application = get_wsgi_application()
