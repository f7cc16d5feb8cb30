"""The naive baseline design: a Django view that reads the order from the database,
polled by clients every second. Served on its own port by the freshness benchmark:

    uvicorn bench.naive_baseline:application
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from tracker.orders.models import Order  # noqa: E402


def order_status(request, pk: int):
    order = Order.objects.filter(pk=pk).values("status", "updated_at").first()
    if order is None:
        return JsonResponse({"error": "not found"}, status=404)
    return JsonResponse({"status": order["status"], "updated_at": order["updated_at"].isoformat()})


urlpatterns = [path("naive/orders/<int:pk>/", order_status)]
settings.ROOT_URLCONF = __name__
application = get_asgi_application()
