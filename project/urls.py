from django.conf import settings
from django.conf.urls.static import static
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memproc/", include("memproc.urls")),
    path("", include("project.pages")),
]

# The demo serves attachment files itself (DEBUG only); production serves MEDIA_URL from its web server
# or uses a storage with signed URLs (S3).
urlpatterns += static(settings.MEDIA_URL, document_root=settings.MEDIA_ROOT)
