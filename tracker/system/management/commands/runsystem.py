import signal
import threading

from django.core.management import call_command
from django.core.management.base import BaseCommand

from tracker.simulator.seed import DEMO_PASSWORD, OPERATOR_USERNAME
from tracker.system.components import components, web_address
from tracker.system.supervisor import Supervisor


class Command(BaseCommand):
    help = "Migrate, seed and run every component of the system until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--no-simulator", action="store_true")

    def handle(self, *args, no_simulator=False, **options):
        self.stdout.write("system | migrating the database ...")
        call_command("migrate", verbosity=0, interactive=False)
        call_command("simulate", seed_only=True, seed=42)
        comps = [c for c in components() if not (no_simulator and c.name == "simulator")]
        supervisor = Supervisor(comps)
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        host, port = web_address()
        base = f"http://{host}:{port}"
        ready = (
            "\n"
            "  ============================================================\n"
            "  Ordertrack is ready.\n"
            f"    customer app     {base}/\n"
            f"    operator admin   {base}/admin/   ({OPERATOR_USERNAME} / {DEMO_PASSWORD})\n"
            f"    REST API docs    {base}/api/docs/\n"
            f"    customers        customer1..customer200 / {DEMO_PASSWORD}\n"
            "    watch events     make tail TOPIC=orders_enriched\n"
            "  Ctrl-C stops everything.\n"
            "  ============================================================"
        )
        try:
            if supervisor.start(ready_message=ready):
                while not stop.wait(0.5):
                    if supervisor.failed.is_set():
                        break
            else:
                supervisor.failed.set()
        finally:
            supervisor.stop()
        if supervisor.failed.is_set():
            raise SystemExit(1)
