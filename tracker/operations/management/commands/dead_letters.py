from django.core.management.base import BaseCommand

from tracker.operations.deadletters import recent_dead_letters


class Command(BaseCommand):
    help = "List the newest dead letters: source, reason and the original message."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=50)

    def handle(self, *args, limit=50, **options):
        letters = recent_dead_letters(limit)
        if not letters:
            self.stdout.write("no dead letters")
        for letter in letters:
            original = letter.original_value().decode(errors="replace")
            self.stdout.write(
                f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset} "
                f"{letter.reason}\n    {original[:300]}"
            )
