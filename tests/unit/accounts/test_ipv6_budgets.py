"""Per-address budgets key an IPv6 client on its /64 (issue 69, N6).

One host is routinely given a whole /64 and may pick any address in it, so a budget keyed
on the full address is one budget per request for it. Every per-address budget (sign-in,
share pages, share socket connects, anonymous API writes) keys on
:func:`tracker.accounts.security.client_ip`, so these go through the entry points.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tracker.accounts.security import client_ip
from tracker.live.limits import socket_client

pytestmark = pytest.mark.django_db

TOKEN = "/api/v1/auth/token/"


def _in_one_64(i: int) -> str:
    return f"2001:db8:1:2:{i:x}:{i * 7:x}::{i + 1:x}"


def test_rotating_inside_one_64_spends_one_sign_in_budget():
    get_user_model().objects.create_user("alice", password="the-right-one-69")
    body = {"username": "nobody", "password": "bad"}
    codes = [
        Client(REMOTE_ADDR=_in_one_64(i))
        .post(TOKEN, body, content_type="application/json")
        .status_code
        for i in range(11)
    ]
    assert codes == [401] * 10 + [429]  # API_THROTTLE_LOGIN: 10/min for the /64
    other = {"username": "alice", "password": "the-right-one-69"}
    elsewhere = Client(REMOTE_ADDR="2001:db8:1:3::1")  # the next /64 has its own
    assert elsewhere.post(TOKEN, other, content_type="application/json").status_code == 200


def test_rotating_inside_one_64_spends_one_share_page_budget():
    codes = [
        Client(REMOTE_ADDR=_in_one_64(i)).get("/t/no-such-link/").status_code for i in range(61)
    ]
    assert codes == [404] * 60 + [429]  # SHARE_VIEW_RATE: 60/min for the /64


def test_share_sockets_and_every_http_budget_key_on_the_64():
    keys = {socket_client({"client": (_in_one_64(i), 5000), "headers": []}) for i in range(5)}
    assert len(keys) == 1  # share-connect: one budget for the /64
    assert keys == {client_ip({"REMOTE_ADDR": _in_one_64(9)})}
    assert client_ip({"REMOTE_ADDR": "2001:db8:1:3::1"}) not in keys
    # An IPv4 client seen through an IPv6 socket is the IPv4 client; IPv4 is per address.
    assert client_ip({"REMOTE_ADDR": "::ffff:192.0.2.7"}) == "192.0.2.7"
    assert client_ip({"REMOTE_ADDR": "192.0.2.7"}) != client_ip({"REMOTE_ADDR": "192.0.2.8"})
