"""The fault drill's own reasoning, without engines (bench/scenarios/fault_drill.py and the
probe's verdict in bench/harness.py): which Kafka node, Spark worker and web process it
picks to kill, what it reads from ``/metrics``, health samples, the strip and the
probes, how it builds Prometheus's configuration, and what it calls a missed, repeated
or reordered status. The drill itself runs the replicated cluster and is a benchmark
(docs/reliability.md, "Faults across a cluster"), not part of ``make test``.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

from bench import harness as common
from bench.scenarios import fault_drill as drill
from localrun import compose as prod
from tests.integration.config.test_cluster_topology import COMPOSE_VARS

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cluster(tmp_path):
    """The replicated cluster's plan, as the drill starts it (nothing runs)."""
    return prod.plan(
        var=tmp_path / "cluster", overrides=COMPOSE_VARS, demo=True, files=drill.cluster_files()
    )


def _metadata(leaders: dict[tuple[str, int], int], lagging: tuple = ()) -> ClusterMetadata:
    """The admin client's own metadata classes, filled as a three-node cluster answers."""
    metadata = ClusterMetadata()
    for (topic, partition), leader in leaders.items():
        topic_md = metadata.topics.setdefault(topic, TopicMetadata())
        topic_md.topic = topic
        part = PartitionMetadata()
        part.id, part.leader, part.replicas = partition, leader, [1, 2, 3]
        part.isrs = [1, 2] if (topic, partition) in lagging else [1, 2, 3]
        topic_md.partitions[partition] = part
    return metadata


# ------------------------------------------------------------------ what the drill kills


def test_the_node_to_kill_leads_the_partition_that_took_the_most_records(cluster):
    before = {("orders", 0): 100, ("order_statuses", 0): 500, ("order_statuses", 1): 900}
    after = {("orders", 0): 160, ("order_statuses", 0): 540, ("order_statuses", 1): 990}
    assert drill.busiest_partition(before, after) == ("order_statuses", 1)  # +90
    # A tie goes to the first by name; a partition new since the first read counts whole.
    assert drill.busiest_partition({}, {("b", 0): 5, ("a", 1): 5}) == ("a", 1)
    metadata = _metadata({("orders", 0): 1, ("order_statuses", 0): 2, ("order_statuses", 1): 3})
    leader = drill.leader_of(metadata, "order_statuses", 1)
    assert leader == 3
    # Node ids as each Kafka launcher of the cluster reads its command line.
    assert drill.kafka_nodes(cluster) == {1: "kafka", 2: "kafka-2", 3: "kafka-3"}
    assert drill.kafka_nodes(cluster)[leader] == "kafka-3"
    lagging = _metadata({("orders", 0): 1, ("orders", 1): 2}, lagging=(("orders", 1),))
    assert drill.under_replicated(lagging, ["orders"]) == ["orders/1"]
    assert drill.under_replicated(metadata, ["orders", "order_statuses"]) == []


def test_the_worker_to_kill_runs_the_stream_jobs_executor(cluster):
    workers = drill.spark_workers(cluster)
    assert sorted(workers.values()) == ["spark-worker", "spark-worker-2"]
    first, second = (f"http://127.0.0.1:{port}" for port in sorted(workers))
    app = drill.stream_app_name()
    assert app == "ordertrack-streaming"
    master = {  # the fields of the standalone master's /json/ the drill reads
        "activeapps": [{"id": "app-2", "name": "something-else"}, {"id": "app-1", "name": app}],
        "workers": [{"webuiaddress": first, "state": "ALIVE"}, {"webuiaddress": second, "state": "ALIVE"}],
    }  # fmt: skip
    states = {
        first: {"executors": [{"id": 0, "appid": "app-2"}]},
        second: {"executors": [{"id": 1, "appid": "app-1"}]},
    }
    chosen = drill.executor_worker(app, master, states)
    assert chosen == second
    assert workers[int(chosen.rsplit(":", 1)[1])] in ("spark-worker", "spark-worker-2")
    # None runs it (or it is not running): nothing to kill, said so.
    assert drill.executor_worker(app, master, {first: {"executors": []}}) is None
    assert drill.executor_worker(app, {"activeapps": []}, states) is None


def test_each_process_serving_metrics_and_each_pinot_server_is_known(cluster):
    targets = drill.metrics_targets(cluster)
    assert {name: job for name, (job, _) in targets.items()} == {
        "web": "web", "web-2": "web", "relay": "relay", "streaming": "streaming",
        "pushbridge": "pushbridge",
    }  # fmt: skip
    ports = [port for _, port in targets.values()]
    assert len(set(ports)) == len(ports)
    servers = drill.pinot_servers(cluster)
    assert sorted(servers) == ["server", "server-2"]
    assert len(set(servers.values())) == 2


def test_the_web_process_to_kill_holds_the_most_sockets():
    text = (
        "# TYPE ordertrack_websockets_open gauge\n"
        'ordertrack_websockets_open{socket="order"} 3.0\n'
        'ordertrack_websockets_open{socket="operations"} 1.0\n'
    )
    assert drill.sockets_open(text) == 4
    assert drill.busiest_web({"web": 2, "web-2": 4}) == "web-2"
    assert drill.busiest_web({"web-2": 1, "web": 1}) == "web"


# ------------------------------------------------------------------ what /metrics shows


def _exposition(stalled=(), behind=(), backlog=0, errors=0, down=(), short=()) -> str:
    """A web process's /metrics text, written out (prometheus_client's own objects would
    share their values through the suite's multiprocess directory once another test set it)."""
    lines = ["# TYPE ordertrack_pipeline_stage_stalled gauge"]
    stages = ("relay", "stream", "pinot", "bridge")
    lines += [
        f'ordertrack_pipeline_stage_stalled{{stage="{s}"}} {float(s in stalled)}' for s in stages
    ]
    lines.append("# TYPE ordertrack_pipeline_stage_behind gauge")
    lines += [
        f'ordertrack_pipeline_stage_behind{{stage="{s}"}} {float(s in behind or s in stalled)}'
        for s in stages
    ]
    lines += [
        "# TYPE ordertrack_outbox_backlog_rows gauge",
        f"ordertrack_outbox_backlog_rows {float(backlog)}",
    ]
    lines.append("# TYPE ordertrack_http_request_duration_seconds histogram")
    for status, count in (("2xx", 5), ("5xx", errors)):
        if count:
            labels = f'route="/api/v1/orders/",method="POST",status="{status}"'
            lines += [
                f'ordertrack_http_request_duration_seconds_bucket{{{labels},le="+Inf"}} {float(count)}',
                f"ordertrack_http_request_duration_seconds_count{{{labels}}} {float(count)}",
                f"ordertrack_http_request_duration_seconds_sum{{{labels}}} {count * 0.01}",
            ]
    lines.append("# TYPE ordertrack_dependency_up gauge")
    lines += [
        f'ordertrack_dependency_up{{dependency="{d}"}} {float(d not in down)}'
        for d in ("database", "kafka", "pinot", "redis")
    ]
    lines.append("# TYPE ordertrack_replicas_missing gauge")
    lines += [
        f'ordertrack_replicas_missing{{store="{store}"}} {float(3 if store in short else 0)}'
        for store in ("kafka", "pinot")
    ]
    lines += ["# TYPE unrelated counter", "unrelated_total 1.0"]
    return "\n".join(lines) + "\n"


def test_metrics_signals_name_stalled_and_behind_stages_backlog_5xx_and_silence():
    quiet = {"web": _exposition(), "web-2": _exposition(), "relay": _exposition()}
    signals, errors = drill.metric_signals(quiet, {})
    assert signals == set()
    assert errors == {"web": 0, "web-2": 0, "relay": 0}
    texts = {
        "web": _exposition(stalled=("pinot",), behind=("relay",), errors=2, down=("redis",)),
        "web-2": _exposition(behind=("pinot",), short=("kafka",)),  # the worst of the two
        "relay": _exposition(backlog=250),
        "streaming": None,
    }
    signals, errors = drill.metric_signals(texts, errors)
    assert signals == {
        "stage pinot stalled", "stage relay behind", "outbox backlog over 100 rows",
        "streaming /metrics not answering", "web answered 5xx", "redis unreachable",
        "kafka replicas missing",
    }  # fmt: skip
    # No new 5xx: no signal; a restarted process (a count lower than before) with 5xx: one.
    again, errors = drill.metric_signals({"web": _exposition(errors=2)}, errors)
    assert again == set()
    restarted, _ = drill.metric_signals({"web": _exposition(errors=1)}, errors)
    assert restarted == {"web answered 5xx"}


def test_prometheus_is_configured_with_the_production_intervals_rules_and_jobs(tmp_path):
    production = yaml.safe_load(drill.PROMETHEUS_YML.read_text())
    targets = {"web": ["127.0.0.1:9100", "127.0.0.1:41234"], "relay": ["127.0.0.1:9101"],
               "streaming": ["127.0.0.1:9102"], "pushbridge": ["127.0.0.1:9103"]}  # fmt: skip
    config = drill.prometheus_config(targets, "127.0.0.1:49090")
    assert config["global"] == production["global"]
    assert config["rule_files"] == [str(drill.ALERT_RULES)] and drill.ALERT_RULES.exists()
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in config["scrape_configs"]}
    assert set(jobs) == {j["job_name"] for j in production["scrape_configs"]}
    assert jobs["web"] == targets["web"] and jobs["prometheus"] == ["127.0.0.1:49090"]
    if shutil.which("promtool"):  # Debian's prometheus package: the file it will read
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        checked = subprocess.run(
            ["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


# ------------------------------------------------------------------ reading the samples


def _sample(t: float, **stages: str) -> dict:
    return {"t": t, "pipeline": {"stages": {k: {"status": v, "lag": 0} for k, v in stages.items()}}}


def test_recovery_is_the_first_time_every_stage_is_ok_and_stays_ok():
    ok = {"relay": "ok", "stream": "ok", "pinot": "ok", "bridge": "ok"}
    samples = [
        _sample(0, **ok),
        _sample(2, **{**ok, "stream": "behind"}),
        _sample(4, **ok),  # one good sample: not yet
        _sample(6, **{**ok, "pinot": "stalled"}),
        {"t": 8, "pipeline": {"error": "HTTPStatusError: 503"}},
        *(_sample(t, **ok) for t in range(10, 24, 2)),
    ]
    assert drill.recovered_at(samples, start=1) == 10
    assert drill.recovered_at(samples, start=1, stable_s=30) is None
    assert drill.first_stable([(0, True), (5, True), (10, True)], 0, 10) == 0
    assert drill.first_stable([(0, True), (5, False), (10, True)], 0, 10) is None


def test_a_fault_shows_when_something_beyond_the_baseline_shows_and_clears_back_to_it():
    points = [
        (0, ["stage relay behind"]),  # the baseline: already showing before the fault
        (10, ["stage relay behind"]),
        (14, ["stage relay behind", "web-2 /metrics not answering"]),
        (16, ["stage pinot stalled"]),
        (18, ["stage relay behind"]),
        (30, ["stage relay behind"]),
        (32, []),
    ]
    shown = drill.shown_and_cleared(points, start=12, end=40, stable_s=10)
    assert shown == {
        "baseline": ["stage relay behind"],
        "shown_s": 2,
        "cleared_s": 6,
        "what": ["stage pinot stalled", "web-2 /metrics not answering"],
    }
    never = drill.shown_and_cleared([(0, []), (20, [])], start=5, end=30)
    assert never["shown_s"] is None and never["cleared_s"] is None
    stuck = drill.shown_and_cleared([(0, []), (20, ["a"]), (60, ["a"])], start=5, end=30)
    assert (stuck["shown_s"], stuck["cleared_s"]) == (15, None)


def test_failed_probes_their_longest_run_latencies_and_refusals():
    probes = [
        {"t": 0, "end": 5, "ok": True, "accepted": {"gps": 1.0, "BEING_COOKED": 0.5},
         "accept_to_socket": {"gps": 0.1, "BEING_COOKED": 0.2}},
        {"t": 5, "end": 65, "ok": False},
        {"t": 10, "end": 70, "ok": False, "accepted": {"ORDER_CONFIRMED": 11.0},
         "accept_to_socket": {"ORDER_CONFIRMED": 4.0}},
        {"t": 15, "end": 20, "ok": True, "accepted": {"gps": 16.0},
         "accept_to_socket": {"gps": 0.3}},
        {"t": 20, "end": 80, "ok": False},
    ]  # fmt: skip
    assert drill.failure_spans(probes) == {"total": 5, "failed": 3, "longest_failure_s": 60}
    assert drill.failure_spans(probes[:4]) == {"total": 4, "failed": 2, "longest_failure_s": 10}
    # Probes that ended in a window but began before it count from its start.
    assert drill.failure_spans(probes[1:3], since=8)["longest_failure_s"] == 62
    assert drill.probes_between(probes, 5, 20) == probes[1:4]
    assert drill.probes_ended(probes, 60, 75) == probes[1:3]
    latency = drill.p99_of(probes, "accept_to_socket", 0, 100)
    assert latency == {"p99_s": 4.0, "n": 4, "probes_without": 2}
    # A latency counts when it was seen: 4.0 s from 11 is at 15, the first two before.
    early = drill.p99_of(probes, "accept_to_socket", 0, 15)
    assert early == {"p99_s": 0.2, "n": 2, "probes_without": 0}
    polls = [(0, 200), (1, 503), (2, 503), (9, 503), (10, 200), (11, 503), (12, 200)]
    assert drill.longest_refusal(polls) == 9
    assert drill.longest_refusal([(0, 503), (4, 503)]) == 4
    assert drill.longest_refusal([(0, 200)]) == 0


def test_the_load_holds_only_with_every_probe_flat_lag_and_the_rate_reached():
    probes = [{"t": t, "ok": True} for t in range(0, 600, 5)]
    flat = [{"t": t, "pipeline": {"stages": {"relay": {"status": "ok", "lag": 5 + t % 3}}}}
            for t in range(0, 600, 2)]  # fmt: skip
    held = drill.hold_verdict(probes, flat, (1000, 3500), 10, 250, 2)
    assert held["held"] and held["orders_per_min_reached"] == 250
    growing = [{"t": t, "pipeline": {"stages": {"relay": {"status": "ok", "lag": t}}}}
               for t in range(0, 600, 2)]  # fmt: skip
    verdict = drill.hold_verdict([*probes, {"t": 601, "ok": False}], growing, (0, 2000), 10, 250, 2)
    assert not verdict["held"]
    assert len(verdict["why_not"]) == 3  # a probe failed, the lag grew, 200 of 250/min


# ------------------------------------------------------------------ what the client saw


def _snapshot(version: int, status: str) -> dict:
    from contract.events import LIFECYCLE

    reached = [s.value for s in LIFECYCLE][: [s.value for s in LIFECYCLE].index(status) + 1]
    timeline = [{"status": s.value, "state": "done" if s.value in reached[:-1] else
                 "current" if s.value == status else "pending"} for s in LIFECYCLE]  # fmt: skip
    return {
        "type": "snapshot",
        "version": version,
        "order": {"status": status, "timeline": timeline},
    }


def _update(version: int, status: str, kind: str = "status") -> dict:
    return {"type": "update", "version": version, "status": status, "kind": kind}


def _status(status: str) -> dict:
    return {"type": "status", "status": status}


REACHED = ["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED", "OUT_FOR_DELIVERY"]


def _log(*messages: dict, connection: int = 1) -> list:
    return [(float(i), connection, m) for i, m in enumerate(messages)]


def test_a_socket_that_saw_every_status_once_in_order_passes():
    # The fast path runs ahead of the enriched one: an update behind a fast status is normal.
    log = _log(
        _snapshot(0, "PLACED_ORDER"),
        _status("ORDER_CONFIRMED"), _update(1, "PLACED_ORDER"),  # the first enriched record
        _update(2, "ORDER_CONFIRMED"), _status("BEING_PREPARED"), _status("BEING_COOKED"),
        _update(3, "BEING_PREPARED"), _update(4, "BEING_COOKED"), _update(5, "OUT_FOR_DELIVERY"),
        _update(6, "OUT_FOR_DELIVERY", "position"),
    )  # fmt: skip
    assert common.socket_verdict(log, REACHED) == {
        "missed": [], "twice": [], "out_of_order": [], "folded": [], "connections": 1,
    }  # fmt: skip


def test_missed_repeated_and_reordered_statuses_are_named():
    log = _log(
        _snapshot(0, "PLACED_ORDER"),
        _status("BEING_PREPARED"), _status("ORDER_CONFIRMED"),  # fast path backwards
        _status("BEING_PREPARED"),  # pushed twice
        _update(3, "BEING_PREPARED"), _update(3, "BEING_PREPARED", "position"),  # version again
        _update(5, "ORDER_CONFIRMED", "position"),  # enriched path backwards
    )  # fmt: skip
    verdict = common.socket_verdict(log, REACHED)
    assert verdict["missed"] == ["BEING_COOKED", "OUT_FOR_DELIVERY"]
    assert verdict["twice"] == ["BEING_PREPARED", "version 3"]
    assert verdict["out_of_order"] == ["ORDER_CONFIRMED", "ORDER_CONFIRMED"]


def test_statuses_folded_into_one_update_are_shown_in_its_timeline_not_missed():
    """A micro-batch that took several changes at once sends one update; the client shows
    every status it carries in ``status_times`` (the order page's timeline)."""
    times = {s: "2026-01-01T00:00:00Z" for s in REACHED}
    log = _log(
        _snapshot(0, "PLACED_ORDER"),
        _update(1, "BEING_COOKED") | {"status_times": {s: times[s] for s in REACHED[:4]}},
        _update(2, "OUT_FOR_DELIVERY") | {"status_times": times},
    )  # fmt: skip
    verdict = common.socket_verdict(log, REACHED)
    assert (verdict["missed"], verdict["twice"], verdict["out_of_order"]) == ([], [], [])
    assert verdict["folded"] == ["ORDER_CONFIRMED", "BEING_PREPARED"]


def test_a_reconnect_whose_snapshot_holds_what_was_pushed_meanwhile_misses_nothing():
    """The ?since= contract: the statuses pushed while the socket was away come back in
    the fresh snapshot's timeline (or ``resumed`` when nothing changed)."""
    log = [
        *_log(_snapshot(0, "PLACED_ORDER"), _update(1, "ORDER_CONFIRMED")),
        *_log(_snapshot(3, "BEING_COOKED"), _update(4, "OUT_FOR_DELIVERY"), connection=2),
    ]
    verdict = common.socket_verdict(log, REACHED)
    assert verdict == {  # what changed while away is in the fresh snapshot's timeline
        "missed": [], "twice": [], "out_of_order": [], "folded": ["BEING_PREPARED"],
        "connections": 2,
    }  # fmt: skip
    stale = [*log, (9.0, 2, _update(3, "BEING_COOKED", "position"))]  # older than the snapshot
    assert common.socket_verdict(stale, REACHED)["twice"] == ["version 3"]
    resumed = _log(_snapshot(2, "BEING_PREPARED"), {"type": "resumed", "version": 2})
    assert common.socket_verdict(resumed, REACHED[:3])["missed"] == []


@pytest.mark.asyncio
async def test_the_probes_socket_comes_back_with_since_after_a_drop_and_stops_at_a_final_code():
    """The follower against a WebSocket server of the test's own speaking the order
    socket's messages: dropped without a close frame (as when its process is killed), it
    reconnects with ``?since=<the newest version it had>``; a final code ends it."""
    import websockets

    paths: list[str] = []

    async def server(ws) -> None:  # noqa: ANN001 - a websockets ServerConnection
        paths.append(ws.request.path)
        if len(paths) == 1:
            await ws.send(json.dumps(_snapshot(3, "BEING_PREPARED")))
            await ws.send(
                json.dumps(_update(4, "BEING_COOKED") | {"position": {"lat": 1.5, "lon": 2.5}})
            )
            ws.transport.abort()
        else:
            await ws.send(json.dumps({"type": "resumed", "order_id": 7, "version": 4}))
            await ws.send(json.dumps({"type": "error", "code": 4404, "message": "No such order."}))
            await ws.close(4404)

    async with websockets.serve(server, "127.0.0.1", 0) as listening:
        port = listening.sockets[0].getsockname()[1]
        endpoint = common.Endpoint(f"http://127.0.0.1:{port}")
        async with common.OrderFollower(endpoint, "/ws/orders/7/", "k") as follower:
            await follower.wait(lambda f: f.final is not None, timeout=10, what="the final code")
    assert paths == ["/ws/orders/7/", "/ws/orders/7/?since=4"]
    assert (follower.connections, follower.final, len(follower.drops)) == (2, 4404, 1)
    assert "1006" in follower.drops[0][1] or "without a close frame" in follower.drops[0][1]
    assert set(follower.seen_at) == {
        "PLACED_ORDER",
        "ORDER_CONFIRMED",
        "BEING_PREPARED",
        "BEING_COOKED",
    }
    assert set(follower.position_at) == {(1.5, 2.5)}
    assert [c for _, c, _ in follower.log] == [1, 1, 2, 2]


def test_the_socket_reconnects_on_the_web_clients_schedule():
    """The probe's socket gives up and backs off as frontend/static/frontend/js/live.js does."""
    live = (ROOT / "frontend" / "static" / "frontend" / "js" / "live.js").read_text()
    finals = re.search(r"const FINAL_CODES = \{([^}]*)\}", live).group(1)
    assert set(map(int, re.findall(r"(\d{4}):", finals))) == common.FINAL_CLOSE_CODES
    start = int(re.search(r"const BACKOFF_START_MS = (\d+);", live).group(1))
    cap = int(re.search(r"const BACKOFF_MAX_MS = (\d+);", live).group(1))
    assert (start / 1000, cap / 1000) == (common.BACKOFF_START_S, common.BACKOFF_MAX_S)
    rng = random.Random(1)
    for attempt in range(12):
        base = min(cap / 1000, start / 1000 * 2**attempt)
        assert base / 2 <= common.reconnect_delay(attempt, rng) <= base  # "equal jitter"


def test_the_endpoint_reaches_sockets_like_its_pages():
    proxied = common.Endpoint("https://localhost:8443")
    assert proxied.ws_url("/ws/orders/7/?since=3") == "wss://localhost:8443/ws/orders/7/?since=3"
    assert proxied.ws_options("k")["ssl"] is not None
    direct = common.Endpoint("http://localhost:8000", headers={"X-Forwarded-Proto": "https"})
    assert direct.ws_url("/ws/operations/") == "ws://localhost:8000/ws/operations/"
    options = direct.ws_options("k")
    assert options["ssl"] is None
    assert options["additional_headers"] == {
        "X-Forwarded-Proto": "https",
        "Authorization": "Token k",
    }


def test_a_row_shown_twice_in_the_rest_history_is_named():
    detail = {
        "timeline": [{"status": "PLACED_ORDER"}, {"status": "DELIVERED"}],
        "path": [{"lat": 1.0, "lon": 2.0, "at": "t1"}, {"lat": 1.0, "lon": 2.0, "at": "t2"}],
    }
    assert common.history_repeats(detail) == []
    detail["path"].append({"lat": 1.0, "lon": 2.0, "at": "t2"})
    detail["timeline"].append({"status": "DELIVERED"})
    assert sorted(map(str, common.history_repeats(detail))) == ["(1.0, 2.0, 't2')", "DELIVERED"]


# ------------------------------------------------------------------ one fault's figures


def test_a_faults_figures_and_its_targets_from_what_was_recorded(capsys):
    rec = drill.FaultRecord(
        "kafka", target="kafka-2 (node 2)", t_inject=100.0, t_repair=160.0, t_ready=175.0,
        t_recovered=190.0, t_end=310.0, orders=(50, 80),
        extra={"leader_changed_s": 8.0},
    )  # fmt: skip
    probes = [
        {"t": 90.0, "end": 95.0, "ok": True, "accepted": {"gps": 92.0},
         "accept_to_socket": {"gps": 0.2}},
        {"t": 100.0, "end": 140.0, "ok": False, "step": "socket", "error": "no status",
         "http_errors": [], "pushed": [130.0], "socket": {"missed": [], "twice": [], "out_of_order": []}},
        {"t": 105.0, "end": 115.0, "ok": True, "pushed": [107.0],
         "accepted": {"ORDER_CONFIRMED": 106.0, "gps": 108.0},
         "update_s": 3.0, "accept_to_socket": {"gps": 1.5, "ORDER_CONFIRMED": 0.4},
         "accept_to_rest": {"gps": 2.5}, "rest_polls": [[110.0, 200]]},
        {"t": 200.0, "end": 205.0, "ok": True, "pushed": [202.0], "accepted": {"gps": 201.0},
         "accept_to_socket": {"gps": 0.1}, "accept_to_rest": {"gps": 0.9}},
    ]  # fmt: skip
    samples = [
        {"t": 98.0, "signals": [], "alerts": {"firing": []}, "dead_letters": 4, "load1": 3.0},
        {"t": 120.0, "signals": ["stage stream behind"], "alerts": {"firing": []},
         "dead_letters": None, "load1": 5.0},
        {"t": 180.0, "signals": [], "alerts": {"firing": ["PipelineStageStalled(stream)"]},
         "dead_letters": 4, "load1": 4.0},
        {"t": 200.0, "signals": [], "alerts": {"firing": []}, "dead_letters": 4, "load1": 3.0},
        {"t": 215.0, "signals": [], "alerts": {"firing": []}, "dead_letters": 4, "load1": 3.0},
    ]  # fmt: skip
    strip = [
        {"t": 99.0, "stages": {"stream": "ok"}},
        {"t": 112.0, "stages": {"stream": "behind"}},
        {"drop": "closed 1006", "t": 113.0},
        {"t": 150.0, "stages": {"stream": "ok"}},
        {"t": 170.0, "stages": {"stream": "ok"}},
    ]
    summary = drill.summarise(rec, probes, samples, strip, rec.t_end)
    assert summary["probes"]["failed"] == 1 and summary["probes"]["total"] == 3
    assert summary["accept_to_socket"]["during"] == {"p99_s": 1.5, "n": 2, "probes_without": 1}
    assert summary["accept_to_socket"]["after"]["p99_s"] == 0.1
    assert (summary["recovered_s"], summary["recovered_after_repair_s"]) == (90.0, 30.0)
    assert summary["fast_resumed_s"] == 22.0  # the first push after the leader change (108)
    assert summary["probes"]["longest_failure_s"] == 5.0  # the next probe passed
    assert summary["enriched_resumed_s"] == 11.0
    assert (summary["strip"]["shown_s"], summary["strip"]["cleared_s"]) == (12.0, 50.0)
    assert summary["metrics"]["what"] == ["stage stream behind"]
    assert summary["alert"]["shown_s"] == 80.0 and summary["alert"]["cleared_s"] == 100.0
    assert summary["dead_letters_new"] == 0
    assert summary["load_avg"] == {"mean": 3.75, "max": 5.0}
    summary["counts_equal"] = True
    verdicts = {t["target"]: t["verdict"] for t in drill.evaluate([summary])}
    assert verdicts["no probe fails for more than 30 s"] == "met"
    assert verdicts["fast socket updates resume within 10 s of the leader change"] == "MISSED"
    assert verdicts["no acknowledged event lost (counts equal, no status missed)"] == "met"
    assert verdicts["shows on the operations strip within 60 s and clears after recovery"] == "met"
    assert verdicts["shows as its alert within 60 s and clears after recovery"] == "MISSED"
    assert verdicts["no new dead letters"] == "met"
    assert not any(t["fault"] != "kafka" for t in drill.evaluate([summary]))
    # The tables print from the result as the JSON holds it.
    summary["counts"] = None
    result = {
        "load": {"multiple": 5.0, "orders_per_min_asked": 250.0,
                 "orders_per_min_reached_in_hold": 248.5, "load_avg_1m": {"mean": 3.2, "max": 5.0}},
        "hold": {"held": True, "probes_passed": 120, "probes": 120},
        "faults": [summary],
        "targets": drill.evaluate([summary]),
        "counts_after_drain": {"postgres": {"orders": 9}, "pinot": {"orders": 9}, "equal": True},
        "error": None,
    }  # fmt: skip
    drill.print_tables(result)
    printed = capsys.readouterr().out
    assert "5x the book's peak (250 orders/min asked, 248.5 reached" in printed
    assert "kafka-2 (node 2)" in printed and "PipelineStageStalled(stream)" in printed
    assert re.search(
        r"fast socket updates resume within 10 s of the leader change +MISSED", printed
    )


def test_a_probe_spanning_two_faults_counts_each_observation_in_the_window_of_its_time():
    """As in the first drill: a probe begun 4.5 s before the Redis fault's window ended
    read the REST detail through the PostgreSQL fault that followed, and the run stopped
    during it. Its 503s, its late REST latency, its socket's drop and its outcome are the
    PostgreSQL fault's; the window of a fault the run stopped in ends with the last thing
    recorded."""
    from dataclasses import asdict

    redis = drill.FaultRecord(
        "redis", t_inject=100.0, t_repair=100.4, t_ready=101.0, t_recovered=103.0, t_end=200.0
    )
    postgres = drill.FaultRecord("postgres", t_inject=200.1, t_repair=220.1, t_ready=220.7)
    spanning = {
        "t": 195.5, "end": 222.0, "ok": True, "step": "done",
        "accepted": {"gps": 197.0, "DELIVERED": 199.0},
        "accept_to_socket": {"gps": 0.1, "DELIVERED": 0.1},
        "accept_to_rest": {"gps": 1.0, "DELIVERED": 22.5},  # DELIVERED shown at 221.5
        "rest_polls": [[198.0, 200], [199.5, 200],
                       *([200.5 + i, 503] for i in range(20)), [221.5, 200]],
        "pushed": [197.05, 199.1],
        "drops": [[205.0, "closed without a close frame"],
                  [205.5, "InvalidStatus: server rejected WebSocket connection: HTTP 500"]],
        "reconnects": 1,  # after the refused attempt at 205.5
        "socket": {"missed": [], "twice": [], "out_of_order": []},
    }  # fmt: skip
    refused = {
        "t": 205.0, "end": 205.1, "ok": False, "step": "place", "error": "place: HTTP 503",
        "http_errors": [{"step": "place", "status": 503, "retry_after": "5"}],
    }  # fmt: skip
    calm = {
        "t": 150.0, "end": 155.0, "ok": True, "step": "done", "accepted": {"gps": 151.0},
        "accept_to_socket": {"gps": 0.2}, "accept_to_rest": {"gps": 1.0},
        "rest_polls": [[152.0, 200]], "pushed": [151.2],
    }  # fmt: skip
    probes = [calm, spanning, refused]
    samples = [{"t": float(t), "load1": 2.0} for t in range(98, 216, 2)]  # stops before 222
    assert drill.reconnects(spanning) == [205.5]

    by_fault = {
        s["fault"]: s
        for s in drill.fault_summaries([redis, postgres], probes, samples, [], {"redis": None})
    }
    on_redis, on_postgres = by_fault["redis"], by_fault["postgres"]
    assert on_redis["rest_503_longest_s"] == 0
    assert on_redis["accept_to_rest"]["after"] == {"p99_s": 1.0, "n": 2, "probes_without": 0}
    assert (on_redis["probes"]["total"], on_redis["socket"]["reconnects"]) == (1, 0)
    assert on_postgres["window_s"] == 21.9  # to the spanning probe's end, the last recorded
    assert on_postgres["rest_503_longest_s"] == 21.0  # 200.5 to the 200 at 221.5
    assert on_postgres["accept_to_rest"]["during"] == {"p99_s": 22.5, "n": 1, "probes_without": 1}
    assert on_postgres["probes"]["total"] == 2 and on_postgres["probes"]["failed"] == 1
    assert on_postgres["probes"]["http"] == {"place 503 Retry-After": 1}
    assert on_postgres["socket"]["reconnects"] == on_postgres["socket"]["probes_reconnected"] == 1

    # A stored result is derived again from what it recorded, and says what changed.
    stored = {
        "fault_records": [asdict(redis), asdict(postgres)],
        "probes": probes, "samples": samples, "strip": [],
        "faults": [{"fault": "redis", "rest_503_longest_s": 21.0, "counts": None},
                   {"fault": "postgres", "rest_503_longest_s": 0.0, "counts": None}],
        "targets": [],
    }  # fmt: skip
    again = drill.recompute(json.loads(json.dumps(stored)))
    assert [s["rest_503_longest_s"] for s in again["faults"]] == [0, 21.0]
    changed = drill.changed_figures(stored, again)
    assert ("redis", "rest_503_longest_s", "21.0", "0.0") in changed
    assert ("postgres", "rest_503_longest_s", "0.0", "21.0") in changed
