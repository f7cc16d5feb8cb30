import logging
import random
import signal
import threading
import time
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from contract.load import BOOK_PEAK_ORDERS_PER_MINUTE, Load
from runtime.conf import env_float
from tracker.simulator.engine import (
    DB_RETRY_SECONDS,
    RealClock,
    SimConfig,
    Simulation,
    VirtualClock,
)
from tracker.simulator.seed import (
    OPERATOR_USERNAME,
    PUBLIC_DEMO_ACCOUNTS,
    DemoAccountsRefused,
    demo_accounts,
    seed_demo,
)


class Command(BaseCommand):
    help = (
        "Seed the demo world and run the business: orders at --rate per minute (the book's "
        "peak is 50), kitchens moving them along, couriers sending a GPS point per second."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--seed", type=int, default=None, help="random seed (deterministic run)"
        )
        parser.add_argument(
            "--rate", type=float, default=BOOK_PEAK_ORDERS_PER_MINUTE, help="orders per minute"
        )
        parser.add_argument("--pace", type=float, default=1.0, help="divide kitchen waits by this")
        parser.add_argument(
            "--traffic",
            type=float,
            default=env_float("SIMULATOR_TRAFFIC", 0.0),
            help="courier speed factor at every hour (0: the hour's traffic; benchmarks pin "
            "it so a level carries the same GPS points at any hour)",
        )
        parser.add_argument("--duration", type=float, default=None, help="seconds to run")
        parser.add_argument("--max-orders", type=int, default=None)
        parser.add_argument("--seed-only", action="store_true", help="create demo data and exit")
        parser.add_argument(
            "--fast",
            action="store_true",
            help="virtual time: no sleeping, event times on a timeline ending now",
        )

    def handle(
        self,
        *args,
        seed=None,
        rate=BOOK_PEAK_ORDERS_PER_MINUTE,
        pace=1.0,
        traffic=0.0,
        duration=None,
        max_orders=None,
        seed_only=False,
        fast=False,
        **options,
    ):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        if rate < 0 or pace <= 0 or traffic < 0:
            raise CommandError("--rate and --traffic must be >= 0 and --pace > 0")
        try:
            accounts = demo_accounts()
        except DemoAccountsRefused as exc:
            raise CommandError(str(exc)) from None
        rng = random.Random(seed)
        counts = self._seeded(rng, accounts)
        password = (
            repr(accounts.password)
            if accounts == PUBLIC_DEMO_ACCOUNTS
            else "the one in SIMULATOR_DEMO_PASSWORD"  # never written to the logs
        )
        self.stdout.write(
            "simulator: demo data ready ("
            + ", ".join(f"{v} {k}" for k, v in counts.items())
            + f"); sign in as {OPERATOR_USERNAME} / customer1 / courier1 / staff1 "
            f"with password {password}"
        )
        self.stdout.flush()
        if seed_only:
            return
        if fast:
            if duration is None:
                raise CommandError("--fast needs --duration (seconds of virtual time)")
            clock = VirtualClock(timezone.now() - timedelta(seconds=duration))
        else:
            clock = RealClock()
        # Nothing reads the action log of a running simulator (replays and tests do).
        config = SimConfig(orders_per_minute=rate, pace=pace, log_limit=0, traffic=traffic or None)
        sim = Simulation(rng, config, clock)
        resumed = sim.resume_open_orders()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        self.stdout.write(
            f"simulator: running at {Load.of_orders(rate).describe()}, pace {pace:g}"
            + (f", traffic x{traffic:g}" if traffic else "")
            + (f", resumed {resumed} open orders" if resumed else "")
        )
        self.stdout.flush()
        stats = sim.run(duration=duration, max_orders=max_orders, stop=stop)
        self.stdout.write("simulator: done " + " ".join(f"{k}={v}" for k, v in stats.items()))

    def _seeded(self, rng: random.Random, accounts) -> dict[str, int]:  # noqa: ANN001
        """The demo data, once the database answers: a simulator started while it is down
        (restarting, failing over) waits for it instead of exiting, which would count as a
        crash and, repeated, stop the whole system."""
        while True:
            try:
                return seed_demo(rng, accounts=accounts)
            except (OperationalError, InterfaceError) as exc:
                logging.getLogger(__name__).warning(
                    "simulator: database unreachable, seeding again in %.0f s: %s",
                    DB_RETRY_SECONDS, exc,
                )  # fmt: skip
                connection.close()
                time.sleep(DB_RETRY_SECONDS)
