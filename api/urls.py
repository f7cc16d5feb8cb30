from django.urls import path, re_path

from api import errors
from api.views import accounts, docs, menu, notifications, operations, orders, sharing

app_name = "api"
addresses = accounts.AddressViewSet.as_view

v1 = [
    path("auth/token/", accounts.TokenLoginView.as_view(), name="token"),
    path("auth/logout/", accounts.LogoutView.as_view(), name="logout"),
    path(
        "auth/logout-everywhere/",
        accounts.LogoutEverywhereView.as_view(),
        name="logout-everywhere",
    ),
    path("auth/socket-ticket/", accounts.SocketTicketView.as_view(), name="socket-ticket"),
    path("me/", accounts.MeView.as_view(), name="me"),
    path("me/addresses/", addresses({"get": "list", "post": "create"}), name="addresses"),
    path(
        "me/addresses/<int:pk>/",
        addresses(
            {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
        ),
        name="address",
    ),
    path("restaurants/", menu.RestaurantListView.as_view(), name="restaurants"),
    path("restaurants/<int:pk>/menu/", menu.MenuView.as_view(), name="menu"),
    path("orders/", orders.OrderListView.as_view(), name="orders"),
    path("orders/<int:pk>/", orders.OrderDetailView.as_view(), name="order"),
    path("orders/<int:pk>/cancel/", orders.OrderCancelView.as_view(), name="order-cancel"),
    path("orders/<int:pk>/advance/", orders.OrderAdvanceView.as_view(), name="order-advance"),
    path(
        "orders/<int:pk>/locations/", orders.CourierLocationView.as_view(), name="order-locations"
    ),
    path("orders/<int:pk>/share/", sharing.ShareLinksView.as_view(), name="order-share"),
    path(
        "notifications/subscriptions/",
        notifications.PushSubscriptionsView.as_view(),
        name="push-subscriptions",
    ),
    path(
        "notifications/subscriptions/<int:pk>/",
        notifications.PushSubscriptionView.as_view(),
        name="push-subscription",
    ),
    path(
        "notifications/preferences/",
        notifications.NotificationPreferencesView.as_view(),
        name="notification-preferences",
    ),
    path("notifications/vapid-key/", notifications.VapidKeyView.as_view(), name="vapid-key"),
    path(
        "notifications/unsubscribe/<str:token>/",
        notifications.UnsubscribeView.as_view(),
        name="unsubscribe-email",
    ),
    path(
        "operations/time-in-status/", operations.TimeInStatusView.as_view(), name="time-in-status"
    ),
    path("operations/stuck-orders/", operations.StuckOrdersView.as_view(), name="stuck-orders"),
    path(
        "operations/deliveries-in-area/",
        operations.DeliveriesInAreaView.as_view(),
        name="deliveries-in-area",
    ),
    path("operations/dead-letters/", operations.DeadLettersView.as_view(), name="dead-letters"),
    path(
        "operations/restaurant-dashboard/",
        operations.RestaurantDashboardView.as_view(),
        name="restaurant-dashboard",
    ),
    path("operations/pipeline/", operations.PipelineView.as_view(), name="pipeline"),
    path("operations/sales-series/", operations.SalesSeriesView.as_view(), name="sales-series"),
]

urlpatterns = [
    path("schema/", docs.SchemaView.as_view(), name="schema"),  # built once per process
    path(
        "docs/",
        docs.SwaggerView.as_view(url_name="api:schema"),  # a static page and its script
        name="docs",
    ),
    path("asyncapi/", docs.asyncapi, name="asyncapi"),
    *[path(f"v1/{p.pattern}", p.callback, name=p.name) for p in v1],
    re_path(r"^[\s\S]*$", errors.not_found),  # any path, a newline in it too: the JSON 404
]
