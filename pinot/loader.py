"""Creates or updates Pinot's schemas and REALTIME tables from ``pinot/tables/``.

One loader for ``make run`` and the tests (localrun/pinot/) and for compose's
``pinot-init`` (``python -m pinot.loader http://pinot-controller:9000``), so the files
are the only copy of the tables. What differs by deployment is set by
pinot/deployment.py, never in a second copy of the files: the stream's broker list, the
physical topic names (``KAFKA_TOPIC_PREFIX``), the consumer factory of the Pinot version
run, the topics' partition count (read from Kafka), the replicas of each partition
(``PINOT_REPLICATION``: 2 on the cluster of docker-compose.cluster.yml, one copy on each
of its two servers), and (locally) the table retention.

On every start a changed file is applied where Pinot allows it (the schema or table is
updated, then its segments reloaded). A change Pinot cannot apply to a live table (a
column dropped or retyped, another primary key, upsert/dedup settings, the topic:
pinot/changes.py) stops start-up with the field named: it needs a new table, never a
silent mismatch. A field that Pinot did not keep (a setting of another Pinot version,
which its JSON reader ignores) also stops start-up.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from contract.events import topic_name
from pinot.changes import config_differences, moved, schema_incompatibilities, unchangeable
from pinot.definitions import TableDef, load_tables
from pinot.deployment import PINOT_VERSION, LoaderError, Settings, table_config
from runtime.conf import env_int, env_str


@dataclass(frozen=True)
class Outcome:
    """What the loader did with one table."""

    table: str
    topic: str
    schema: str  # created | updated | unchanged
    config: str  # created | updated | unchanged

    def __str__(self) -> str:
        return f"{self.table} <- {self.topic}: table {self.config}, schema {self.schema}"


class Controller:
    """The few calls of Pinot's controller REST API the loader needs."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        response = self.client.request(method, path, json=body, params=params or None)
        if response.status_code == 404 and method == "GET":
            return None
        if response.status_code >= 400:
            raise LoaderError(
                f"Pinot controller: {method} {path} answered {response.status_code}: "
                f"{response.text[:800]}"
            )
        try:
            return response.json()
        except json.JSONDecodeError:
            return response.text

    def schema(self, name: str) -> dict[str, Any] | None:
        return self.call("GET", f"/schemas/{name}")

    def table(self, name: str) -> dict[str, Any] | None:
        found = self.call("GET", f"/tables/{name}", type="realtime")
        return (found or {}).get("REALTIME")

    def servers(self) -> list[str]:
        """The server instances the cluster knows (``Server_<host>_<port>``)."""
        instances = (self.call("GET", "/instances") or {}).get("instances", [])
        return [name for name in instances if name.startswith("Server_")]


def load_table(controller: Controller, table: TableDef, settings: Settings) -> Outcome:
    """Create, update or keep one table's schema and config; raise on what cannot change."""
    config = table_config(table, settings)
    topic = config["tableIndexConfig"]["streamConfigs"]["stream.kafka.topic.name"]
    stored_schema = controller.schema(table.name)
    stored_config = controller.table(table.name)
    schema_state = config_state = "unchanged"

    if stored_schema is None:
        controller.call("POST", "/schemas", table.schema)
        schema_state = "created"
    elif config_differences(table.schema, stored_schema):
        problems = schema_incompatibilities(table.schema, stored_schema)
        if problems:
            raise LoaderError(
                f"{table.name}: schema change Pinot cannot apply to a live table: "
                + "; ".join(problems)
                + " (a new table is needed: docs/pinot.md)"
            )
        controller.call("PUT", f"/schemas/{table.name}", table.schema, reload="false")
        schema_state = "updated"

    if stored_config is None:
        controller.call("POST", "/tables", config)
        config_state = "created"
    else:
        changed = config_differences(config, stored_config)
        fixed = unchangeable(config, stored_config)
        if fixed:
            raise LoaderError(
                f"{table.name}: change Pinot cannot apply to a live table: {', '.join(fixed)} "
                "(a new table is needed: docs/pinot.md)"
            )
        if changed:
            controller.call("PUT", f"/tables/{table.name}", config)
            config_state = "updated"

    kept = controller.table(table.name) or {}
    ignored = config_differences(config, kept)
    if ignored:
        raise LoaderError(
            f"{table.name}: Pinot {PINOT_VERSION} did not keep {', '.join(ignored)} "
            "(a setting of another Pinot version?)"
        )
    kept_schema = controller.schema(table.name) or {}
    ignored = config_differences(table.schema, kept_schema)
    if ignored:
        raise LoaderError(f"{table.name}: Pinot did not keep schema {', '.join(ignored)}")
    if "updated" in (schema_state, config_state) and stored_config is not None:
        controller.call("POST", f"/segments/{table.name}/reload", type="REALTIME")
    if stored_config is not None and moved(
        config, stored_config, ("segmentsConfig", "replicasPerPartition")
    ):
        # A new replica count applies to new segments only: move the held ones too (no
        # downtime, the consuming ones included), or a lost server would take them along.
        controller.call(
            "POST", f"/tables/{table.name}/rebalance", type="REALTIME", dryRun="false",
            includeConsuming="true", downtime="false", minAvailableReplicas="1",
        )  # fmt: skip
    return Outcome(table.name, topic, schema_state, config_state)


def topic_partitions(settings: Settings, tables: Iterable[TableDef]) -> dict[str, int]:
    """Each table's topic's partition count, as Kafka has it (the topics exist before the
    tables: Pinot cannot create a table on a missing topic either)."""
    from runtime.kafka import consumer, partitions_of

    cons = consumer(**{"bootstrap.servers": settings.kafka_bootstrap})
    try:
        return {
            t.name: len(partitions_of(cons, topic_name(t.topic, settings.topic_prefix)))
            for t in tables
        }
    except Exception as exc:
        raise LoaderError(f"cannot read the topics' partitions from Kafka: {exc}") from exc
    finally:
        cons.close()


def load(settings: Settings, tables: dict[str, TableDef] | None = None) -> list[Outcome]:
    """Apply every table of ``pinot/tables/`` (checked first, all of them, before any call)."""
    tables = tables if tables is not None else load_tables()
    each = {name: settings for name in tables}
    if settings.kafka_partitions is None:
        counts = topic_partitions(settings, tables.values())
        each = {name: replace(settings, kafka_partitions=n) for name, n in counts.items()}
    for name, table in tables.items():
        table_config(table, each[name])  # refuses a flush time past Kafka's retention up front
    controller = Controller(settings.controller_url)
    try:
        if settings.replication is not None:
            servers = controller.servers()
            if len(servers) < settings.replication:
                raise LoaderError(
                    f"PINOT_REPLICATION={settings.replication} needs as many servers, and the "
                    f"cluster has {len(servers)} ({', '.join(servers) or 'none'}): start them "
                    "first, or Pinot would put fewer copies of each partition than asked"
                )
        return [load_table(controller, table, each[name]) for name, table in tables.items()]
    finally:
        controller.close()


def wait_queryable(broker_url: str, tables: list[str], timeout: float = 60.0) -> None:
    """Wait until each table answers ``COUNT(*)`` through the broker from a server.

    A new table, or one whose segments are coming online, answers with ``exceptions``, or
    with no server queried and no result at all (the broker knows of no server holding
    its segments yet): readiness means every table answers cleanly from a server once."""
    deadline = time.monotonic() + timeout
    pending = list(tables)
    last = ""
    with httpx.Client(base_url=broker_url.rstrip("/"), timeout=5.0) as client:
        while pending:
            name = pending[0]
            try:
                answer = client.post("/query/sql", json={"sql": f"SELECT COUNT(*) FROM {name}"})
                body = answer.json()
                last = json.dumps(body.get("exceptions") or "")[:300]
                if (
                    answer.status_code == 200
                    and not body.get("exceptions")
                    and body.get("numServersQueried", 0) > 0
                ):
                    pending.pop(0)
                    continue
            except (httpx.HTTPError, ValueError) as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise LoaderError(f"Pinot table {name} not queryable after {timeout:.0f} s: {last}")
            time.sleep(0.25)


def main(argv: list[str]) -> int:
    """``python -m pinot.loader [CONTROLLER_URL]``: compose's pinot-init, or by hand."""
    url = argv[0] if argv else env_str("PINOT_CONTROLLER_URL", "http://127.0.0.1:9000")
    retention = env_int("PINOT_RETENTION_DAYS", 0)
    settings = Settings(controller_url=url, retention_days=retention or None)
    try:
        for outcome in load(settings):
            print(f"pinot-init: {outcome}", flush=True)
    except LoaderError as exc:
        print(f"pinot-init: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
