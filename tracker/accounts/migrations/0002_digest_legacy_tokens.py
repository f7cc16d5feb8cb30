"""Tokens issued before tokens were hashed (DRF's ``authtoken_token``, the key in clear)
become digests here, so apps signed in before the upgrade stay signed in; the clear table
is then dropped. Written in SQL: DRF's token app is no longer installed, so its model
cannot be loaded, and the row's time is copied by the database, never converted."""

import hashlib

from django.db import migrations

LEGACY = "authtoken_token"


def digest_legacy_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if LEGACY not in connection.introspection.table_names():
        return  # a database made after the upgrade
    q = connection.ops.quote_name
    token = q(apps.get_model("accounts", "ApiToken")._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {q('key')} FROM {q(LEGACY)}")
        keys = [row[0] for row in cursor.fetchall()]
        for key in keys:
            cursor.execute(
                f"INSERT INTO {token} ({q('digest')}, {q('client')}, {q('created')}, {q('user_id')}) "
                f"SELECT %s, '', {q('created')}, {q('user_id')} FROM {q(LEGACY)} WHERE {q('key')} = %s",
                [hashlib.sha256(key.encode()).hexdigest(), key],
            )
        cursor.execute(f"DROP TABLE {q(LEGACY)}")
        cursor.execute("DELETE FROM django_migrations WHERE app = %s", ["authtoken"])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    # Backwards there is nothing to restore: the keys are gone by design.
    operations = [migrations.RunPython(digest_legacy_tokens, migrations.RunPython.noop)]
