import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime
from prometheus_client import REGISTRY

from runtime.metrics import serve_metrics
from tracker.outbox.relay import Relay


class Command(BaseCommand):
    help = "Publish the transactional outbox to Kafka (runs until stopped)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--replay-since",
            metavar="ISO_TIME",
            help="first re-publish every event from this time (ISO 8601), or 'all'",
        )
        parser.add_argument("--once", action="store_true", help="publish what is pending and exit")

    def handle(self, *args, replay_since=None, once=False, **options):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s relay %(message)s")
        relay = Relay()
        if replay_since:
            since = None
            if replay_since != "all":
                since = parse_datetime(replay_since)
                if since is None:
                    raise CommandError(f"--replay-since: not an ISO 8601 time: {replay_since!r}")
            count = relay.replay(since)
            self.stdout.write(f"marked {count} events for re-publishing")
        if once:
            total = 0
            while sent := relay.publish_batch():
                total += sent
            self.stdout.write(f"published {total} events")
            return
        REGISTRY.register(relay)
        serve_metrics("relay")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        self.stdout.write("relay: publishing the outbox", ending="\n")
        self.stdout.flush()
        relay.run(stop)
