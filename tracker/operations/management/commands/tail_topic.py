import json

from django.core.management.base import BaseCommand, CommandError

from contract.events import Topic
from runtime.kafka import iter_topic


class Command(BaseCommand):
    help = "Print the messages of a topic as they arrive (from the beginning, or only new ones)."

    def add_arguments(self, parser):
        parser.add_argument("topic", help=", ".join(t.value for t in Topic))
        parser.add_argument("--no-follow", action="store_true", help="stop when the topic is idle")

    def handle(self, *args, topic, no_follow=False, **options):
        if topic not in Topic._value2member_map_:
            raise CommandError(
                f"unknown topic {topic!r}; one of: {', '.join(t.value for t in Topic)}"
            )
        try:
            for record in iter_topic(topic, follow=not no_follow, max_wait=3600 * 24 * 365):
                try:
                    body = json.dumps(json.loads(record.value), ensure_ascii=False)
                except (TypeError, ValueError):
                    body = repr(record.value)
                key = record.key.decode(errors="replace") if record.key else "-"
                self.stdout.write(
                    f"{record.topic}[{record.partition}]@{record.offset} key={key} {body}"
                )
                self.stdout.flush()
        except KeyboardInterrupt:
            pass
