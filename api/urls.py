from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api import errors, views

app_name = "api"

v1 = [
    path("auth/token/", views.TokenLoginView.as_view(), name="token"),
    path("auth/logout/", views.LogoutView.as_view(), name="logout"),
    path("me/", views.MeView.as_view(), name="me"),
    path("me/addresses/", views.AddressListView.as_view(), name="addresses"),
    path("me/addresses/<int:pk>/", views.AddressDetailView.as_view(), name="address"),
    path("restaurants/", views.RestaurantListView.as_view(), name="restaurants"),
    path("restaurants/<int:pk>/menu/", views.MenuView.as_view(), name="menu"),
    path("orders/", views.OrderListView.as_view(), name="orders"),
    path("orders/<int:pk>/", views.OrderDetailView.as_view(), name="order"),
    path("orders/<int:pk>/cancel/", views.OrderCancelView.as_view(), name="order-cancel"),
    path("orders/<int:pk>/advance/", views.OrderAdvanceView.as_view(), name="order-advance"),
    path("orders/<int:pk>/locations/", views.CourierLocationView.as_view(), name="order-locations"),
    path("operations/time-in-status/", views.TimeInStatusView.as_view(), name="time-in-status"),
    path("operations/stuck-orders/", views.StuckOrdersView.as_view(), name="stuck-orders"),
    path(
        "operations/deliveries-in-area/",
        views.DeliveriesInAreaView.as_view(),
        name="deliveries-in-area",
    ),
    path("operations/dead-letters/", views.DeadLettersView.as_view(), name="dead-letters"),
    path(
        "operations/restaurant-dashboard/",
        views.RestaurantDashboardView.as_view(),
        name="restaurant-dashboard",
    ),
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    *[path(f"v1/{p.pattern}", p.callback, name=p.name) for p in v1],
    re_path(r"^.*$", errors.not_found),
]
