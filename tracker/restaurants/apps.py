from django.apps import AppConfig


class RestaurantsConfig(AppConfig):
    name = "tracker.restaurants"
    verbose_name = "Restaurants and menus"
