"""Page routes of the browser frontend (the data comes from /api/v1/ and /ws/)."""

from django.urls import path, re_path

from frontend import views

app_name = "frontend"

urlpatterns = [
    path("", views.my_orders, name="my-orders"),
    path("orders/<int:order_id>/", views.order_page, name="order"),
    path("order/new/", views.place_order, name="place-order"),
    path("addresses/", views.addresses, name="addresses"),
    path("settings/notifications/", views.notification_settings, name="notification-settings"),
    path("restaurant/", views.restaurant_dashboard, name="restaurant-dashboard"),
    path("restaurant/board/", views.kitchen_board, name="kitchen-board"),
    path("operations/", views.operations, name="operations"),
    path("courier/", views.courier, name="courier"),
    path("accounts/login/", views.SignInView.as_view(), name="login"),
    path("accounts/logout/", views.SignOutView.as_view(), name="logout"),
    path("t/<str:token>/", views.share_page, name="share"),
    # Anything else under t/ too (no trailing slash, extra segments): the same page or the
    # same 404, with the same private headers, never Django's own 404 or slash redirect.
    re_path(r"^t/(?P<token>.+)$", views.share_page),
]
