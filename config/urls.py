from django.contrib import admin
from django.urls import include, path

from frontend.views import service_worker
from tracker.operations.views import healthz, metrics, readyz

admin.site.site_header = "Ordertrack operations"
admin.site.site_title = "Ordertrack"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    # The service worker at the root, so that it may control every page (frontend/views.py).
    path("sw.js", service_worker, name="service-worker"),
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("", include("frontend.urls")),
]
