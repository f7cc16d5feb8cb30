from django.urls import path

from tracker.live.consumers import (
    CustomerOrdersSocket,
    OperationsSocket,
    OrderSocket,
    RestaurantOrdersSocket,
)

websocket_urlpatterns = [
    path("ws/orders/", CustomerOrdersSocket.as_asgi()),
    path("ws/orders/<int:order_id>/", OrderSocket.as_asgi()),
    path("ws/restaurants/<int:restaurant_id>/", RestaurantOrdersSocket.as_asgi()),
    path("ws/operations/", OperationsSocket.as_asgi()),
]
