"""Web Push subscriptions over the API: registering, listing, deleting one's own, and the
refusals that keep a subscription from being a URL into our own network (issue 71)."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tests.factories import make_courier, make_customer
from tracker.notifications import vapid
from tracker.notifications.models import PushSubscription

pytestmark = pytest.mark.django_db

URL = "/api/v1/notifications/subscriptions/"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def browser_keys() -> dict[str, str]:
    """What a browser's ``PushSubscription.toJSON().keys`` holds: a fresh P-256 point and
    a 16-byte secret."""
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return {"p256dh": _b64(point), "auth": _b64(b"0123456789abcdef")}


def _client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _subscribe(api: APIClient, endpoint: str, keys: dict[str, str] | None = None):
    body = {"endpoint": endpoint, "keys": keys or browser_keys(), "expirationTime": None}
    return api.post(URL, body, format="json")


def _refusal(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["fields"]


@pytest.fixture
def local_push(settings):
    """The debug/test setting that lets a push service listen on loopback."""
    settings.WEBPUSH_ALLOW_LOCAL = True


def test_a_customer_registers_lists_and_deletes_their_own_subscription(local_push):
    alice = make_customer("alice")
    api = _client(alice.user)
    created = _subscribe(api, "http://127.0.0.1:9/push/abc")
    assert created.status_code == 201, created.content
    body = created.json()
    assert set(body) == {
        "id", "endpoint", "label", "created_at", "last_success_at", "last_failure_at"
    }  # fmt: skip
    assert "keys" not in body
    again = _subscribe(api, "http://127.0.0.1:9/push/abc")  # the same browser, new keys
    assert again.status_code == 200
    assert [s["id"] for s in api.get(URL).json()] == [body["id"]]
    assert api.get(f"{URL}{body['id']}/").json()["endpoint"] == "http://127.0.0.1:9/push/abc"
    assert api.delete(f"{URL}{body['id']}/").status_code == 204
    assert api.get(URL).json() == []


def test_another_users_subscription_is_not_found(local_push):
    alice, bob = make_customer("alice"), make_customer("bob")
    mine = _subscribe(_client(alice.user), "http://127.0.0.1:9/push/alice").json()
    bobs = _client(bob.user)
    assert bobs.get(URL).json() == []
    assert bobs.get(f"{URL}{mine['id']}/").status_code == 404
    assert bobs.delete(f"{URL}{mine['id']}/").status_code == 404
    assert PushSubscription.objects.filter(pk=mine["id"]).exists()


def test_only_customers_subscribe(local_push):
    rider = make_courier("rider")
    assert _subscribe(_client(rider.user), "http://127.0.0.1:9/push/r").status_code == 403


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://fcm.googleapis.com/fcm/send/x", "https"),
        ("https://push.example.com/x", "not a known browser push service"),
        ("https://user:pw@fcm.googleapis.com/x", "no user name"),
        ("not a url", "https"),
    ],
)
def test_an_endpoint_off_the_known_push_services_is_refused(endpoint, reason):
    fields = _refusal(_subscribe(_client(make_customer().user), endpoint))
    assert list(fields) == ["endpoint"]
    assert reason in fields["endpoint"][0]


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("127.0.0.1", "loopback"),
        ("[::1]", "loopback"),
        ("169.254.169.254", "metadata"),
        ("169.254.10.1", "link-local"),
        ("[::ffff:10.0.0.1]", "private"),
        ("[fd00:ec2::254]", "metadata"),
        ("0.0.0.0", "private or reserved"),
        ("localhost", "loopback"),
    ],
)
def test_an_endpoint_that_reaches_our_own_network_is_refused(settings, host, reason):
    settings.WEBPUSH_ALLOWED_HOSTS = [host.strip("[]")]  # allowed by name, refused by address
    fields = _refusal(_subscribe(_client(make_customer().user), f"https://{host}/push"))
    assert reason in fields["endpoint"][0]


@pytest.mark.parametrize("host", ["10.0.0.7", "169.254.169.254", "[fe80::1]"])
def test_the_local_push_setting_still_refuses_private_and_metadata_addresses(local_push, host):
    fields = _refusal(_subscribe(_client(make_customer().user), f"http://{host}:8080/push"))
    assert list(fields) == ["endpoint"]


def test_a_public_address_on_an_allowed_host_is_accepted(settings):
    settings.WEBPUSH_ALLOWED_HOSTS = ["8.8.8.8"]
    assert _subscribe(_client(make_customer().user), "https://8.8.8.8/push").status_code == 201


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"p256dh": "not*base64", "auth": "MDEyMzQ1Njc4OWFiY2RlZg"}, "keys.p256dh"),
        ({"p256dh": _b64(b"\x04" + b"\x01" * 64), "auth": "MDEyMzQ1Njc4OWFiY2RlZg"}, "keys.p256dh"),
        ({"p256dh": _b64(b"\x04" * 33), "auth": "MDEyMzQ1Njc4OWFiY2RlZg"}, "keys.p256dh"),
        ({"p256dh": None, "auth": _b64(b"short")}, "keys.auth"),
    ],
)
def test_a_malformed_key_is_refused_naming_it(local_push, keys, field):
    if keys["p256dh"] is None:
        keys = {**keys, "p256dh": browser_keys()["p256dh"]}
    fields = _refusal(_subscribe(_client(make_customer().user), "http://127.0.0.1:9/p", keys))
    assert list(fields) == [field]


def test_a_password_change_deletes_the_users_subscriptions(local_push):
    alice, bob = make_customer("alice"), make_customer("bob")
    _subscribe(_client(alice.user), "http://127.0.0.1:9/push/alice")
    _subscribe(_client(bob.user), "http://127.0.0.1:9/push/bob")
    alice.user.set_password("a-new-one-71")
    alice.user.save()
    assert list(PushSubscription.objects.values_list("endpoint", flat=True)) == [
        "http://127.0.0.1:9/push/bob"
    ]


def test_a_password_changed_without_a_signal_unseals_the_subscription(local_push):
    from django.contrib.auth.hashers import make_password

    from tracker.notifications import services

    alice = make_customer("alice")
    _subscribe(_client(alice.user), "http://127.0.0.1:9/push/alice")
    users = get_user_model().objects
    users.filter(pk=alice.user.pk).update(password=make_password("bulk-71"))
    subscription = PushSubscription.objects.get()
    assert not services.still_sealed(subscription, users.get(pk=alice.user.pk))


def test_deactivation_and_signing_out_everywhere_delete_subscriptions(local_push):
    alice, bob = make_customer("alice"), make_customer("bob")
    _subscribe(_client(alice.user), "http://127.0.0.1:9/push/alice")
    _subscribe(_client(bob.user), "http://127.0.0.1:9/push/bob")
    alice.user.is_active = False
    alice.user.save()
    assert not PushSubscription.objects.filter(user=alice.user).exists()
    assert _client(bob.user).post("/api/v1/auth/logout-everywhere/").status_code == 200
    assert not PushSubscription.objects.exists()


def test_the_vapid_key_is_a_p256_point(settings, tmp_path):
    settings.WEBPUSH_VAPID_KEY_FILE = str(tmp_path / "vapid.pem")
    settings.WEBPUSH_VAPID_GENERATE = True
    vapid.private_key.cache_clear()
    try:
        key = _client(make_customer().user).get("/api/v1/notifications/vapid-key/").json()
        raw = base64.urlsafe_b64decode(key["public_key"] + "==")
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
        assert (tmp_path / "vapid.pem").exists()  # made once, kept for the next process
    finally:
        vapid.private_key.cache_clear()


def test_preferences_default_to_push_only_and_change_by_field():
    api = _client(make_customer().user)
    url = "/api/v1/notifications/preferences/"
    assert api.get(url).json() == {
        "push_enabled": True,
        "email_enabled": False,
        "moments": [
            "confirmed", "out_for_delivery", "at_door", "delivered", "cancelled", "running_late"
        ],
    }  # fmt: skip
    changed = api.patch(url, {"email_enabled": True, "moments": ["delivered", "confirmed"]})
    assert changed.json() == {
        "push_enabled": True,
        "email_enabled": True,
        "moments": ["confirmed", "delivered"],
    }
    assert _refusal(api.patch(url, {"moments": ["soon"]})) == {
        "moments[0]": ['"soon" is not a valid choice.']
    }


def test_the_one_click_unsubscribe_turns_email_off_for_its_user_only():
    from tracker.notifications import selectors, services
    from tracker.notifications.channels import unsubscribe_token

    alice, bob = make_customer("alice"), make_customer("bob")
    for customer in (alice, bob):
        services.change_preferences(customer, email_enabled=True)
    url = f"/api/v1/notifications/unsubscribe/{unsubscribe_token(alice.user.pk)}/"
    assert APIClient().post(url).status_code == 204  # no sign-in: a mail client posts it
    assert not selectors.preferences_of(alice).email_enabled
    assert selectors.preferences_of(bob).email_enabled
    forged = "/api/v1/notifications/unsubscribe/" + unsubscribe_token(bob.user.pk)[:-2] + "xx/"
    assert APIClient().post(forged).status_code == 404
