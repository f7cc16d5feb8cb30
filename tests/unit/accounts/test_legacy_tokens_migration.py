"""Apps signed in before tokens were hashed stay signed in (issue 69, N5).

The database as the upgrade finds it: DRF's ``authtoken_token`` with keys in clear (the
table its migrations made; the app is no longer installed, so it is made here with the
same columns). Django's migration executor then runs ``accounts``' data migration.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.factories import make_courier, make_customer
from tracker.accounts.models import ApiToken
from tracker.accounts.security import sealed_key, user_for_token

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("accounts", "0001_initial"), ("accounts", "0002_digest_legacy_tokens")
LEGACY = "authtoken_token"


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def _legacy_table(rows: list[tuple[str, int, object]]) -> None:
    """DRF's token table (authtoken 0001-0003: key the primary key, one token per user)."""
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {q(LEGACY)} ({q('key')} varchar(40) NOT NULL PRIMARY KEY, "
            f"{q('created')} {connection.data_types['DateTimeField']} NOT NULL, "
            f"{q('user_id')} integer NOT NULL UNIQUE)"
        )
        for key, user_id, created in rows:
            cursor.execute(
                f"INSERT INTO {q(LEGACY)} ({q('key')}, {q('created')}, {q('user_id')}) "
                "VALUES (%s, %s, %s)",
                [key, connection.ops.adapt_datetimefield_value(created), user_id],
            )


def test_tokens_issued_before_the_upgrade_keep_working_and_are_kept_only_as_digests():
    alice, rider = make_customer("alice").user, make_courier("rider").user
    _migrate(BEFORE)
    issued = timezone.now() - timedelta(days=3)
    keys = {alice: sealed_key(alice), rider: sealed_key(rider)}
    _legacy_table([(key, user.pk, issued) for user, key in keys.items()])
    rider.set_password("reset-before-the-upgrade")  # its old key was sealed to another hash
    rider.save()

    _migrate(AFTER)

    assert user_for_token(keys[alice]) == alice
    assert user_for_token(keys[rider]) is None  # the upgrade revives no revoked token
    token = ApiToken.objects.get(user=alice)
    assert abs(token.created - issued) < timedelta(seconds=1)  # the 30 days still run
    assert keys[alice] not in ApiToken.objects.values_list("digest", flat=True)
    assert LEGACY not in connection.introspection.table_names()  # no key is left in clear


def test_a_database_made_after_the_upgrade_migrates_without_the_old_table():
    _migrate(BEFORE)
    _migrate(AFTER)
    assert LEGACY not in connection.introspection.table_names()
