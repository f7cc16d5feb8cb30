"""The job's settings: every knob, read from the environment with embedded defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.events import SOURCE_TOPICS, topic_name
from runtime.conf import env_bool, env_int, env_str, kafka_config, var_dir

from .join import DEFAULT_RETENTION

#: The layout of the join state. Spark refuses to resume a checkpoint whose state has
#: another layout, so the default checkpoint is named after it and a new layout starts
#: a new checkpoint, rebuilt from the topics (docs/operations.md, "Upgrades").
#: 2: an order's lines are written from its row, no longer kept as rows of their own.
STATE_LAYOUT = 2


def _default_checkpoint_dir() -> str:
    # Not "streaming": the driver-state job that wrote there had another plan and state.
    return str(var_dir() / "checkpoints" / f"stream-join-{STATE_LAYOUT}")


@dataclass(frozen=True)
class Settings:
    """Every knob of the job, read from the environment with embedded defaults."""

    bootstrap_servers: str = field(default_factory=lambda: kafka_config().bootstrap_servers)
    input_prefix: str = field(default_factory=lambda: kafka_config().topic_prefix)
    output_prefix: str = field(
        default_factory=lambda: env_str("STREAMING_OUTPUT_PREFIX", kafka_config().topic_prefix)
    )
    checkpoint_dir: str = field(
        default_factory=lambda: env_str("STREAMING_CHECKPOINT_DIR", _default_checkpoint_dir())
    )
    trigger_ms: int = field(default_factory=lambda: env_int("STREAMING_TRIGGER_MS", 100))
    shuffle_partitions: int = field(
        default_factory=lambda: env_int("STREAMING_SHUFFLE_PARTITIONS", 2)
    )
    starting_offsets: str = field(
        default_factory=lambda: env_str("STREAMING_STARTING_OFFSETS", "earliest")
    )
    #: How long after its placement an order's join state is kept (watermark delay).
    retention: str = field(
        default_factory=lambda: env_str("STREAMING_ORDER_RETENTION", DEFAULT_RETENTION)
    )
    #: Upper bound of records read per micro-batch (0: no bound).
    max_offsets_per_trigger: int = field(
        default_factory=lambda: env_int("STREAMING_MAX_OFFSETS_PER_TRIGGER", 100_000)
    )
    #: Fail when offsets were lost (deleted by retention, reset) instead of skipping them.
    fail_on_data_loss: bool = field(
        default_factory=lambda: env_bool("STREAMING_FAIL_ON_DATA_LOSS", True)
    )
    #: How the driver reads each batch's progress: ``latest`` asks for the last batch's
    #: four times a second (the batches before it only when one was missed); ``recent``
    #: asks for the last 100 batches' once a second.
    progress: str = field(default_factory=lambda: env_str("STREAMING_PROGRESS", "latest"))
    spark_master: str = field(default_factory=lambda: env_str("SPARK_MASTER", "local[2]"))
    #: Extra Spark settings, ``key=value`` pairs separated by ``;`` (tuning without a release).
    spark_conf: str = field(default_factory=lambda: env_str("STREAMING_SPARK_CONF", ""))
    #: Hadoop's local file system through java.nio (:mod:`jvm.hadoop`): where the driver
    #: and executors share this machine's files (local runs, the local cluster test);
    #: off where executors run elsewhere (compose).
    nio_local_fs: bool = field(default_factory=lambda: env_bool("STREAMING_NIO_LOCAL_FS", True))
    available_now: bool = False

    def __post_init__(self) -> None:
        if self.progress not in ("latest", "recent"):
            raise ValueError(f"STREAMING_PROGRESS must be latest or recent: {self.progress}")

    @property
    def source_topics(self) -> list[str]:
        return [topic_name(t, self.input_prefix) for t in SOURCE_TOPICS]
