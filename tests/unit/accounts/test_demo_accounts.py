"""The simulator's demo accounts (issue 53, H1): a known password only with debug on.

``make run`` (debug on) keeps its public demo accounts. With debug off (compose's ``demo``
profile, ``make run-prod``, a cluster run) the simulator creates accounts only with the
password the operator gives in ``SIMULATOR_DEMO_PASSWORD``, and never a superuser.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError

from tracker.simulator.seed import DEMO_PASSWORD, OPERATOR_USERNAME

pytestmark = pytest.mark.django_db

OPERATOR_SECRET = "correct-horse-battery-staple-53"


def test_with_debug_off_the_simulator_refuses_to_create_accounts_with_a_known_password(settings):
    settings.DEBUG = False
    settings.SIMULATOR_DEMO_PASSWORD = ""
    with pytest.raises(CommandError, match="SIMULATOR_DEMO_PASSWORD"):
        call_command("simulate", seed_only=True, seed=1)
    assert authenticate(username=OPERATOR_USERNAME, password=DEMO_PASSWORD) is None
    assert not get_user_model().objects.exists()


@pytest.mark.parametrize("given", [DEMO_PASSWORD, "short", "1234567890"])
def test_with_debug_off_a_public_or_weak_demo_password_is_refused(settings, given):
    settings.DEBUG = False
    settings.SIMULATOR_DEMO_PASSWORD = given
    with pytest.raises(CommandError, match="SIMULATOR_DEMO_PASSWORD"):
        call_command("simulate", seed_only=True, seed=1)
    assert not get_user_model().objects.exists()


def test_with_debug_off_the_accounts_take_the_operators_password_and_none_is_a_superuser(
    settings, capsys
):
    settings.DEBUG = False
    settings.SIMULATOR_DEMO_PASSWORD = OPERATOR_SECRET
    call_command("simulate", seed_only=True, seed=1)
    users = get_user_model().objects
    assert users.count() > 200
    assert not users.filter(is_superuser=True).exists()
    assert authenticate(username=OPERATOR_USERNAME, password=DEMO_PASSWORD) is None
    for name in (OPERATOR_USERNAME, "customer1", "courier1", "staff1"):
        assert authenticate(username=name, password=OPERATOR_SECRET) is not None, name
    assert users.get(username=OPERATOR_USERNAME).is_staff  # still the operator role
    assert OPERATOR_SECRET not in capsys.readouterr().out  # never printed to the logs


def test_with_debug_on_make_run_keeps_its_demo_accounts(settings):
    settings.DEBUG = True
    settings.SIMULATOR_DEMO_PASSWORD = ""
    call_command("simulate", seed_only=True, seed=1)
    operator = authenticate(username=OPERATOR_USERNAME, password=DEMO_PASSWORD)
    assert operator is not None and operator.is_superuser
    assert authenticate(username="customer1", password=DEMO_PASSWORD) is not None


def _seeded_before_the_fix(settings) -> None:
    """A database seeded by ``make run`` (or before the demo-account fix): the public
    password, ``operator`` a superuser; the seeder since creates only missing accounts."""
    settings.DEBUG = True
    call_command("simulate", seed_only=True, seed=1)
    settings.DEBUG = False


def test_with_debug_off_demo_accounts_with_the_public_password_fail_the_checks(settings):
    _seeded_before_the_fix(settings)
    with pytest.raises(SystemCheckError, match="public demo password"):
        call_command("check", databases=["default"])  # as `migrate` runs them, before the web


def test_with_debug_off_the_seeder_retires_the_public_password_of_an_old_database(settings):
    _seeded_before_the_fix(settings)
    settings.SIMULATOR_DEMO_PASSWORD = OPERATOR_SECRET
    call_command("simulate", seed_only=True, seed=1)
    users = get_user_model().objects
    assert authenticate(username=OPERATOR_USERNAME, password=DEMO_PASSWORD) is None
    assert not users.filter(is_superuser=True).exists()
    for name in (OPERATOR_USERNAME, "customer1", "courier1", "staff1"):
        assert authenticate(username=name, password=OPERATOR_SECRET) is not None, name
    call_command("check", databases=["default"])  # passes now
    users.create_user("customer999", password=DEMO_PASSWORD)  # a name like the demo's
    with pytest.raises(SystemCheckError, match="customer999"):
        call_command("check", databases=["default"])
