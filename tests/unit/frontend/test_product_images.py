"""A product's picture is an https address or a path under STATIC_URL, nothing else.

The demo seeds paths under STATIC_URL (pictures shipped with the frontend), so an operator
who opens a seeded product in Django admin and presses Save must not be stopped by a field
they never touched; what the menu page would put into an ``<img src>`` that a browser
resolves elsewhere, runs, or blocks is refused with a message saying what to write instead.
"""

from __future__ import annotations

import pytest
from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from tests.factories import make_restaurant, seed_small_world
from tracker.restaurants.models import Product
from tracker.simulator.seed import OPERATOR_USERNAME

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    """The seeded operator, signed in to Django admin (a superuser in the public demo)."""
    seed_small_world()
    browser = Client()
    browser.force_login(get_user_model().objects.get(username=OPERATOR_USERNAME))
    return browser


def change_url(product: Product) -> str:
    return f"/admin/restaurants/product/{product.pk}/change/"


def as_saved_unchanged(browser: Client, product: Product) -> dict[str, str]:
    """What the browser sends when the operator opens the change page and presses Save."""
    page = browser.get(change_url(product))
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(field, forms.BooleanField):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = str(value)
    return data


def test_an_operator_resaves_a_seeded_product_untouched(operator):
    product = Product.objects.order_by("pk").first()
    assert product.image_url.startswith(settings.STATIC_URL)  # the seed's form, a site path
    before = product.image_url

    response = operator.post(change_url(product), as_saved_unchanged(operator, product))

    assert response.status_code == 302, response.context["adminform"].form.errors
    product.refresh_from_db()
    assert product.image_url == before


def test_every_seeded_picture_passes_the_models_own_rule(operator):
    for product in Product.objects.all():
        product.full_clean()  # raises ValidationError naming the product's field


@pytest.mark.parametrize(
    "address",
    [
        "https://cdn.example.com/menu/pizza.png",
        "https://cdn.example.com/menu/pizza.png?w=144",
        "/static/menu/pizza.svg",
        "",
    ],
)
def test_an_https_address_or_a_static_path_is_saved(operator, address):
    product = Product.objects.order_by("pk").first()
    data = as_saved_unchanged(operator, product) | {"image_url": address}

    response = operator.post(change_url(product), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    product.refresh_from_db()
    assert product.image_url == address


REFUSED = [
    ("/media/pizza.png", "A path on this site must name a file under /static/"),
    ("/static/", "A path on this site must name a file under /static/"),
    ("javascript:alert(document.cookie)", "“javascript:” addresses are refused"),
    ("JavaScript:alert(1)", "“javascript:” addresses are refused"),
    ("data:image/svg+xml,<svg/onload=alert(1)>", "Remove “<”"),
    ("data:image/png;base64,iVBORw0KGgo=", "“data:” addresses are refused"),
    ("//evil.example/x.png", "Addresses starting with // are refused"),
    ("/\\evil.example/x.png", "Remove “\\”"),
    ("http://cdn.example.com/menu/pizza.png", "Plain http:// pictures are refused"),
    ("/static/../config/settings.py", "Remove the . and .. parts"),
    ("/static/menu/%2e%2e/%2E%2E/admin/", "Remove the . and .. parts"),
    ("/static/menu/pizza.svg ", None),  # trailing space: the admin's form strips it
    ("/static/menu/big pizza.svg", "Remove the space"),
    ("/static/menu/pizza.svg\t", None),
    ("/static/menu/pi\nzza.svg", "Remove U+000A"),
    ("cdn.example.com/menu/pizza.png", "Enter an https:// address or a path under /static/"),
    ("https://cdn", "Enter a valid https:// address"),
    ("https://ops:secret@cdn.example.com/x.png", "Remove the user name and password"),
]


@pytest.mark.parametrize(("address", "message"), REFUSED, ids=[a for a, _ in REFUSED])
def test_anything_else_is_refused_with_what_to_write_instead(operator, address, message):
    product = Product.objects.order_by("pk").first()
    before = product.image_url
    data = as_saved_unchanged(operator, product) | {"image_url": address}

    response = operator.post(change_url(product), data)

    if message is None:  # surrounding whitespace is trimmed by the form, then accepted
        assert response.status_code == 302
        product.refresh_from_db()
        assert product.image_url == address.strip()
        return
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["image_url"]
    assert any(message in error for error in errors), errors
    product.refresh_from_db()
    assert product.image_url == before


@pytest.mark.parametrize(("address", "message"), [r for r in REFUSED if r[1] is not None])
def test_the_rule_is_the_models_so_every_writer_shares_it(address, message):
    product = make_restaurant().products.first()
    product.image_url = address

    with pytest.raises(ValidationError) as refused:
        product.full_clean()

    assert any(message in error for error in refused.value.message_dict["image_url"])


def test_a_path_follows_a_static_url_with_a_script_prefix(settings):
    settings.STATIC_URL = "/ordertrack/static/"
    product = make_restaurant().products.first()

    product.image_url = "/ordertrack/static/menu/pizza.svg"
    product.full_clean()
    product.image_url = "/static/menu/pizza.svg"
    with pytest.raises(ValidationError, match="under /ordertrack/static/"):
        product.full_clean()
