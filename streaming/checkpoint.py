"""The job's checkpoint, read before Spark resumes it: is it whole, and what did
Kafka's retention delete before the job read it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from runtime.conf import kafka_config

from .settings import Settings


class CheckpointError(RuntimeError):
    """The checkpoint's offsets and its join state do not belong together."""


def check_checkpoint(checkpoint_dir: str | Path) -> None:
    """Refuse a checkpoint whose committed batches and state store disagree.

    Resuming committed offsets with no state would treat every open order as new
    (half-empty records, lost status times); state without offsets would be
    applied to a replay from the start. Either way the fix is a rebuild.
    """
    spark_dir = Path(checkpoint_dir) / "spark"
    committed = any((spark_dir / "commits").glob("[0-9]*"))
    state = (spark_dir / "state").is_dir() and any((spark_dir / "state").iterdir())
    if committed == state:
        return
    found = "committed batches but no join state" if committed else "join state but no commits"
    raise CheckpointError(
        f"streaming: checkpoint {spark_dir} has {found}; it cannot be resumed. "
        "Rebuild from the topics: stop the job, delete that directory "
        "(STREAMING_CHECKPOINT_DIR) and start again, or run the job with `--reprocess`."
    )


def checkpoint_positions(checkpoint_dir: str | Path) -> dict[str, dict[int, int]]:
    """Where the checkpoint resumes each source partition: the end offsets of its last
    committed batch (Spark's offset log: a version line, the batch's metadata, then one
    JSON line per source); {} before the first commit."""
    spark_dir = Path(checkpoint_dir) / "spark"
    commits = [int(p.name) for p in (spark_dir / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    try:
        lines = (spark_dir / "offsets" / str(max(commits))).read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:
        try:
            source = json.loads(line)
        except ValueError:
            continue
        for topic, parts in source.items() if isinstance(source, dict) else ():
            out[topic] = {int(p): int(o) for p, o in parts.items()}
    return out


def retention_losses(settings: Settings) -> list[str]:
    """What Kafka's retention deleted before the job read it (a stop longer than the
    topics' retention): one line per partition. With ``STREAMING_FAIL_ON_DATA_LOSS``
    (production's default) the query then fails and this says why; ``make run`` skips
    them and says what was skipped."""
    positions = checkpoint_positions(settings.checkpoint_dir)
    if not positions:
        return []
    from runtime.kafka import consumer, start_offsets

    config = replace(kafka_config(), bootstrap_servers=settings.bootstrap_servers)
    cons = consumer(config)
    lines = []
    try:
        for topic, parts in sorted(positions.items()):
            starts = start_offsets(cons, topic, parts)
            for partition, position in sorted(parts.items()):
                if starts[partition] > position:
                    lines.append(
                        f"retention deleted {starts[partition] - position} records of "
                        f"{topic}[{partition}] (offsets {position}-{starts[partition] - 1}) "
                        "before this job read them"
                        + ("" if settings.fail_on_data_loss else "; skipping them")
                    )
    finally:
        cons.close()
    return lines
