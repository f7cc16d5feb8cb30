"""The job's SparkSession: tuned for short micro-batches over one small plan.

The measurements behind each setting are in docs/performance.md ("Figures behind
choices in the code"); the comments here say why.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from runtime.conf import BASE_DIR

from .settings import Settings

#: Optimizer rules that find nothing to do in the job's plan, at a cost on every batch.
EXCLUDED_RULES = (
    "org.apache.spark.sql.catalyst.optimizer.PruneFilters",
    "org.apache.spark.sql.catalyst.optimizer.RemoveRedundantAliases",
    "org.apache.spark.sql.execution.datasources.SchemaPruning",
)

CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)

#: The class whose log says a micro-batch outlasted the trigger (quieted below).
TRIGGER_EXECUTOR = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def spark_session(settings: Settings, app_name: str = "ordertrack-streaming") -> Any:
    """A local SparkSession tuned for latency."""
    # Python workers must import `tracker` and `streaming`.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(BASE_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(BASE_DIR), *filter(None, paths)])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "false")
        # The validation expressions derived from the contract make whole-stage methods
        # too large for the JIT (HotSpot leaves methods over 8 KB of bytecode
        # interpreted); per-operator code runs the plan faster.
        .config("spark.sql.codegen.wholeStage", "false")
        # Nor per-operator code: every task regenerates the Java source of each projection
        # to look it up in the compiled-class cache, which for these expressions costs more
        # than evaluating a micro-batch's rows interpreted.
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        # Spark optimises and plans every micro-batch again (it keeps no plan across
        # batches), and over the contract's expressions a few of its rules cost much
        # and change nothing in this plan: exchange and subquery reuse (one shuffle, no
        # subquery), constraint propagation (filters inferred from the projections),
        # PruneFilters, RemoveRedundantAliases, SchemaPruning (file sources).
        .config("spark.sql.exchange.reuse", "false")
        .config("spark.sql.execution.reuseSubquery", "false")
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.sql.optimizer.excludedRules", ",".join(EXCLUDED_RULES))
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        .config("spark.python.worker.reuse", "true")
        # PySpark records the Python call site of every DataFrame function for error
        # messages: extra JVM calls for each function the plan is built from.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # Executors (on a cluster: other processes, other machines) import the same code.
        .config("spark.executorEnv.PYTHONPATH", str(BASE_DIR))
        .config("spark.ui.showConsoleProgress", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # The watermark eviction reads the whole state every batch: once the state
        # outgrows RocksDB's cache, it decompresses most of it again each time. The cache
        # holds only blocks it has read, so a small state costs no more memory.
        .config("spark.sql.streaming.stateStore.rocksdb.blockCacheSizeMB", "64")
        # The checkpoint is a local directory. Spark's default writer of it renames each
        # file through Hadoop's FileContext, which without Hadoop's native library starts
        # a `readlink` process for every path it renames; the FileSystem API renames with
        # rename(2), atomic on a local disk, and keeps the checksums.
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    for key, value in connector_conf(settings).items():
        builder = builder.config(key, value)
    for pair in filter(None, (p.strip() for p in settings.spark_conf.split(";"))):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"STREAMING_SPARK_CONF: expected key=value, got {pair!r}")
        builder = builder.config(key.strip(), value.strip())
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # A batch that outlasts the trigger is normal here, not news: our own one-line
    # progress log reports every batch's duration, so Spark's per-batch warning is noise.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        TRIGGER_EXECUTOR, jvm.org.apache.logging.log4j.Level.ERROR
    )
    return spark


def connector_conf(settings: Settings) -> dict[str, str]:
    """Spark's Kafka connector on the job's classpath (``spark.jars``: the driver serves
    them to executors, on a cluster too), and the local file system fix."""
    from jvm import hadoop, maven

    conf = {"spark.jars": ",".join(str(jar) for jar in maven.jars("spark-kafka"))}
    if settings.nio_local_fs:
        conf.update(hadoop.spark_conf())
    return conf
