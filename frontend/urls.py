"""Page routes of the browser frontend (the data comes from /api/v1/ and /ws/)."""

from django.urls import path

from frontend import views

app_name = "frontend"

urlpatterns = [
    path("", views.my_orders, name="my-orders"),
    path("orders/<int:order_id>/", views.order_page, name="order"),
    path("order/new/", views.place_order, name="place-order"),
    path("operations/", views.operations, name="operations"),
    path("accounts/login/", views.SignInView.as_view(), name="login"),
    path("accounts/logout/", views.SignOutView.as_view(), name="logout"),
]
