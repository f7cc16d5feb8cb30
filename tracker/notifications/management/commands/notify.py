import logging
import signal
import threading

from django.core.management.base import BaseCommand

from runtime.metrics import serve_metrics
from tracker.notifications import follow, vapid


class Command(BaseCommand):
    help = (
        "Decide customers' notification moments from order_statuses and delivery_statuses and "
        "send them by Web Push and email, each at most once per order, moment and target."
    )

    def handle(self, *args, **options):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s notifier %(message)s")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        if not vapid.configured():
            self.stderr.write(
                "notifier: no VAPID key (WEBPUSH_VAPID_PRIVATE_KEY or WEBPUSH_VAPID_KEY_FILE): "
                "Web Push cannot be sent"
            )
            raise SystemExit(2)
        serve_metrics("notifier")
        self.stdout.write("notifier: following order_statuses and delivery_statuses")
        self.stdout.flush()
        follow.run(stop)
