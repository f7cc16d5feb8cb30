"""Every stage reports its lag, with real processes: Apache Kafka, the relay, Apache
Pinot, the web (two uvicorn workers, multi-process metrics) and the Spark stream job
run as ``make run`` starts them (the one launcher, :class:`localrun.launch.System`),
with the simulator placing orders, and Debian's Prometheus scraping them all.

* every documented process serves every documented metric name on its documented port;
* every process listens on loopback only (issue 69, N2), but for one allow-listed port;
* SIGSTOP one stage (the outbox relay): the web's health endpoint and ``/readyz``
  report it stalled, the operations page's strip turns it red (a browser), and
  Prometheus fires ``PipelineStageStalled`` from the production rules; SIGCONT and it
  is ok again.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from localrun.launch import LaunchError, System
from runtime.metrics import NAMES
from tests.conftest import free_port
from tests.processes import listeners
from tests.waiting import wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[3]
MANAGE = [sys.executable, str(ROOT / "manage.py")]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
STALL_SECONDS = 4
# For humans, beside the other browser tests' screenshots (docs/images keeps a chosen one).
SCREENSHOT = ROOT / "var" / "screenshots" / "pipeline-strip-stalled.png"


#: What a stage's answer may be while the system starts or a stage is stopped: no answer
#: yet, or one without the part asked for.
UNANSWERED = (httpx.HTTPError, KeyError, ValueError)


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline-health")
    env = {
        "KAFKA_TOPIC_PREFIX": "",
        "KAFKA_EMBEDDED": "true",
        "WEB_WORKERS": "2",
        "PIPELINE_SAMPLE_SECONDS": "1",
        "PIPELINE_STALL_SECONDS": str(STALL_SECONDS),
        "LOG_LEVEL": "WARNING",
    }
    patch = pytest.MonkeyPatch()
    # The defaults make run has on a plain shell: no outside servers, nothing preset.
    for key in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR", "SPARK_LOCAL_IP"):
        patch.delenv(key, raising=False)
    log = io.StringIO()
    wanted = ("kafka", "relay", "pinot", "web", "streaming")
    launched = System(wanted, workdir=tmp, env=env, out=log, max_restarts=0)
    for key, value in launched.env.items():  # the commands below and the reads: this run's
        patch.setenv(key, value)
    ports = {
        "web": int(launched.env["WEB_PORT"]),
        "relay": int(launched.env["RELAY_METRICS_PORT"]),
        "streaming": int(launched.env["STREAMING_METRICS_PORT"]),
        "prometheus": free_port(),
    }
    subprocess.run([*MANAGE, "migrate", "-v0"], cwd=ROOT, check=True)
    subprocess.run([*MANAGE, "simulate", "--seed-only", "--seed", "4"], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip

    prometheus = None
    load = None
    try:
        try:
            launched.start()
        except LaunchError:
            pytest.fail(log.getvalue()[-3000:])
        # Real time, busy enough that every stage's input grows each second.
        load = subprocess.Popen(
            [*MANAGE, "simulate", "--rate", "240", "--pace", "30", "--seed", "5"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if shutil.which("prometheus"):
            prometheus = start_prometheus(tmp, ports)
        yield {
            "ports": ports,
            "children": {c.component.name: c for c in launched.children},
            "web": f"http://127.0.0.1:{ports['web']}",
            "prometheus": f"http://127.0.0.1:{ports['prometheus']}" if prometheus else None,
            "log": log,
            "load": load,
        }
    finally:
        for proc in (load, prometheus):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        launched.stop()
        patch.undo()


def start_prometheus(tmp: Path, ports: dict[str, int]) -> subprocess.Popen:
    """Debian's Prometheus on the embedded system, with the production rules; only the
    ``for:`` durations are shortened to fit a test."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "1s"
    (tmp / "alerts.yml").write_text(yaml.safe_dump(rules))
    targets = {
        "web": ports["web"],
        "relay": ports["relay"],
        "streaming": ports["streaming"],
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "alerts.yml")],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in targets.items()
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115 - the process owns it
    )


def scrape(url: str) -> set[str]:
    """Every family and sample name in an exposition (counters lose ``_total`` as a family)."""
    text = httpx.get(url, timeout=10).raise_for_status().text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return names


def operator_client(web: str) -> httpx.Client:
    client = httpx.Client(base_url=web, timeout=10)
    token = client.post(
        "/api/v1/auth/token/", json={"username": "operator", "password": "ordertrack-demo"}
    ).raise_for_status()
    client.headers["Authorization"] = f"Token {token.json()['token']}"
    return client


def test_every_process_serves_every_documented_metric(system):
    ports = system["ports"]
    urls = {
        "relay": f"http://127.0.0.1:{ports['relay']}/metrics",
        "streaming": f"http://127.0.0.1:{ports['streaming']}/metrics",
        "web": f"{system['web']}/metrics",
    }
    # A record the stream job must refuse (its dead-letter counter then has a reason),
    # and an operator's socket (the web's bridge and socket gauges then have values).
    from runtime import kafka

    producer = kafka.producer()
    producer.produce("orders", key=b"1", value=b'{"not": "an order"}')
    producer.flush(10)
    client = operator_client(system["web"])
    assert client.get("/api/v1/orders/").status_code == 200  # a REST latency sample
    import websockets.sync.client as ws

    token = client.headers["Authorization"]
    url = f"ws://127.0.0.1:{ports['web']}/ws/operations/"
    with ws.connect(url, additional_headers={"Authorization": token}) as sock:
        first = sock.recv(10)
        assert '"snapshot"' in first or '"pipeline"' in first
        missing = {}
        for process, url in urls.items():
            wanted, deadline = set(NAMES[process]), time.monotonic() + 30
            while (absent := wanted - scrape(url)) and time.monotonic() < deadline:
                time.sleep(0.5)  # labelled series appear with their first value
            if absent:
                missing[process] = sorted(absent)
        assert missing == {}
    # Counted per reason by the batch that refused it (batches take seconds on a busy machine).
    wait_until(
        lambda: (
            'ordertrack_stream_dead_letters_total{reason="' in httpx.get(urls["streaming"]).text
        ),
        90,
        "the dead letter counted with its reason",
        ignoring=UNANSWERED,
    )


#: (process, port variable) -> why it may listen beyond loopback. Only what has no
#: supported setting: Pinot 0.11's server binds its query port with Netty's
#: ``bind(port)`` (pinot-core QueryServer), and ``pinot.server.netty.host`` is only the
#: name it registers in Helix. docs/operations.md's checklist says so.
ALLOWED = {
    ("pinot server", "PINOT_SERVER_PORT"): "Pinot 0.11's QueryServer binds every interface",
}


def test_every_process_listens_on_loopback_only(system):
    """Issue 69, N2: every TCP socket any process of the system listens on (found through
    the process tree, not ``ss`` or truncated names) is on 127.0.0.0/8 or ::1, except
    :data:`ALLOWED`; an allow-listed one that moves to loopback must leave the list."""
    roots = [c.process.pid for c in system["children"].values() if c.process is not None]
    found = listeners(*roots, system["load"].pid)
    table = "\n".join(map(str, found))
    ports = {int(os.environ[v]) for v in ("PINOT_ZOOKEEPER_PORT", "PINOT_SERVER_PORT")}
    ports.add(system["ports"]["web"])
    assert ports <= {item.port for item in found}, f"the walk missed known listeners:\n{table}"

    allowed = {(who, int(os.environ[variable])) for who, variable in ALLOWED}
    exposed = [item for item in found if not item.loopback and (item.who, item.port) not in allowed]
    assert not exposed, "listening beyond loopback:\n" + "\n".join(map(str, exposed))
    stale = allowed - {(item.who, item.port) for item in found if not item.loopback}
    assert not stale, f"allow-listed but on loopback now (drop from ALLOWED): {stale}"


def test_a_stopped_stage_is_reported_stalled_everywhere(system, tmp_path):
    web = system["web"]
    client = operator_client(web)

    def stages() -> dict[str, dict]:
        answer = client.get("/api/v1/operations/pipeline/").raise_for_status().json()
        return {s["name"]: s for s in answer["stages"]}

    # The relay: the simulator writes outbox rows every second, so its input grows
    # steadily (the stream job's batches may take longer than this test's short stall
    # time when the machine is busy, which would make a stage after it flap).
    wait_until(lambda: stages()["relay"]["status"] == "ok", 30, "the relay ok", ignoring=UNANSWERED)
    assert httpx.get(f"{web}/readyz").json().keys() == {"status"}  # the detail is operators'
    assert client.get("/readyz").json()["pipeline"]["stages"]
    relay = system["children"]["relay"].process
    os.killpg(relay.pid, signal.SIGSTOP)
    try:
        stalled = wait_until(
            lambda: stages()["relay"]["status"] == "stalled" and stages()["relay"],
            STALL_SECONDS + 30,
            "the relay reported stalled",
            ignoring=UNANSWERED,
        )
        assert stalled["lag"] > 0 and stalled["stuck_seconds"] >= STALL_SECONDS
        # Each web worker samples on its own: the one answering /readyz may judge the stall
        # a sample later than the one that answered above.
        ready = wait_until(
            lambda: (r := client.get("/readyz")).status_code == 503 and r,
            15,
            "/readyz answering 503",
            ignoring=UNANSWERED,
        )
        assert ready.json()["pipeline"]["status"] == "stalled"
        assert stages()["pinot"]["status"] != "stalled"  # only the stopped one is red
        browser_sees_red(web, "relay")
        if system["prometheus"]:
            wait_until(lambda: firing(system["prometheus"], "relay"), 30,
                       "PipelineStageStalled firing for the relay", ignoring=UNANSWERED)  # fmt: skip
    finally:
        os.killpg(relay.pid, signal.SIGCONT)
    wait_until(
        lambda: stages()["relay"]["status"] == "ok", 30, "the relay ok again", ignoring=UNANSWERED
    )


def firing(prometheus: str, stage: str) -> bool:
    alerts = httpx.get(f"{prometheus}/api/v1/alerts").json()["data"]["alerts"]
    return any(
        a["labels"] == {"alertname": "PipelineStageStalled", "severity": "critical", "stage": stage}
        and a["state"] == "firing"
        for a in alerts
    )


def browser_sees_red(web: str, name: str) -> None:
    """The operations page's strip shows the stage red (Chromium), and a screenshot."""
    from playwright.sync_api import expect, sync_playwright

    from tests.fixtures_browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(base_url=web, viewport={"width": 1280, "height": 900})
            page.goto("/accounts/login/?next=/operations/")
            page.get_by_label("Username").fill("operator")
            page.get_by_label("Password").fill("ordertrack-demo")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url("**/operations/")
            stage = page.locator(f'#pipeline-strip [data-stage="{name}"][data-status="stalled"]')
            stage.wait_for(timeout=15_000)
            assert "Stalled" in stage.inner_text()
            other = page.locator('#pipeline-strip [data-stage="pinot"]')
            assert other.get_attribute("data-status") != "stalled"
            # The strip is rebuilt from every sample: an element found a moment ago may be
            # detached (computed style ''), so the colour is checked on the current one.
            expect(stage).to_have_css("border-left-color", "rgb(180, 35, 24)")  # --bad
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.locator("#pipeline-strip").scroll_into_view_if_needed()
            page.screenshot(
                path=str(SCREENSHOT), clip={"x": 0, "y": 0, "width": 1280, "height": 420}
            )
        finally:
            browser.close()


@pytest.mark.skipif(not shutil.which("promtool"), reason="Debian's prometheus package")
def test_alert_rules_pass_promtool_check_and_unit_tests():
    check = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout
    unit = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True,
                          text=True, cwd=RULE_TESTS.parent)  # fmt: skip
    assert unit.returncode == 0, unit.stdout + unit.stderr
    config = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(RULES.parent / "prometheus.yml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_stall_rule_needs_growing_input_and_a_position_that_does_not_move():
    """The judgement alone, on the figures a sample would take (input, lag) per second."""
    from tracker.operations.stages import StageState

    def run(samples: list[tuple[int, int]]) -> list[str]:
        state, seen = StageState("pinot", "Pinot"), []
        for second, value in enumerate(samples):
            state.judge(value, float(second), stall_seconds=10, behind_records=100)
            seen.append(state.status)
        return seen

    idle = [(50, 0)] * 20
    assert set(run(idle)) == {"ok"}
    moving_behind = [(1000 + 100 * t, 500) for t in range(20)]  # keeps up, far behind
    assert set(run(moving_behind)) == {"behind"}
    frozen = [(10 + t, t) for t in range(20)]  # input grows, position stays at 10
    statuses = run(frozen)
    assert statuses[4] == "ok" and statuses[6] == "behind" and statuses[11:] == ["stalled"] * 9
    stopped_input = [(10, 0)] + [(20, 10)] * 19  # work waits, no new input: behind only
    assert run(stopped_input)[12:] == ["behind"] * 8
    recovers = frozen + [(40, 0)]
    assert run(recovers)[-1] == "ok"
    assert run([(5, 0), "broker: down"])[-1] == "unknown"
