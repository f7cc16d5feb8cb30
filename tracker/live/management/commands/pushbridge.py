import logging
import signal
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.management.base import BaseCommand

from runtime.metrics import serve_metrics
from tracker.live.bridge import Bridge, send_in_order
from tracker.live.reader import run_readers


class Command(BaseCommand):
    help = (
        "Fan order_statuses, delivery_locations and orders_enriched out to WebSocket groups "
        "through the (Redis) channel layer."
    )

    def handle(self, *args, **options):
        logging.basicConfig(level=logging.INFO, format="%(asctime)s pushbridge %(message)s")
        layer = get_channel_layer()
        send = async_to_sync(send_in_order)
        bridge = Bridge(lambda sends: send(layer, sends))
        serve_metrics("pushbridge")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *a: stop.set())
        signal.signal(signal.SIGINT, lambda *a: stop.set())
        self.stdout.write(
            "pushbridge: following order_statuses, delivery_locations and orders_enriched"
        )
        self.stdout.flush()
        run_readers(bridge, stop)
