"""The site under ASGI: `uvicorn bench.concurrency_site.asgi:application`."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.concurrency_site.settings")
application = get_asgi_application()
