"""The one Java class of local runs, built from ``jvm/java/`` with the machine's javac.

Hadoop's local file system, without Hadoop's native library (pyspark ships none), sets the
permission of every file it creates by starting a ``chmod`` process: several per
micro-batch for the stream job's checkpoint, each a fork of a JVM of a gigabyte or more
(docs/performance.md). ``ordertrack.NioLocalFileSystem`` sets the same bits through
java.nio. The jar is built under ``var/jvm`` on first use and again when a source is
newer; without a javac the job runs on Hadoop's own class and says so.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from runtime.conf import var_dir

log = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("java")
#: Hadoop's ``file:`` scheme with permissions set through java.nio.
LOCAL_FILE_SYSTEM = "ordertrack.NioLocalFileSystem"


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    javac = Path(java_home, "bin", "javac") if java_home else None
    if javac is not None and javac.exists():
        return str(javac)
    found = shutil.which("javac")
    if found is None:
        raise FileNotFoundError("no javac on PATH or in JAVA_HOME")
    return found


def _hadoop_api_jar() -> Path:
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise FileNotFoundError("pyspark's jars hold no hadoop-client-api jar")
    return jars[-1]


def build_jar(target: Path | None = None) -> Path:
    """The jar of ``jvm/java``'s classes, compiled unless it is newer than every source."""
    jar = target or var_dir() / "jvm" / "ordertrack-hadoop.jar"
    sources = sorted(SOURCES.rglob("*.java"))
    newest = max(source.stat().st_mtime for source in sources)
    if jar.exists() and jar.stat().st_mtime >= newest:
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        classes = Path(tmp, "classes")
        command = [_javac(), "--release", "17", "-nowarn", "-cp", str(_hadoop_api_jar())]
        subprocess.run(
            [*command, "-d", str(classes), *map(str, sources)],
            check=True,
            capture_output=True,
            text=True,
        )
        built = Path(tmp, jar.name)
        with zipfile.ZipFile(built, "w") as archive:
            for path in sorted(classes.rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        os.replace(built, jar)  # whole, or not at all, for a job starting beside this one
    return jar


def spark_conf() -> dict[str, str]:
    """The Spark settings that put the class under the ``file:`` scheme ({} without a javac)."""
    try:
        jar = build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        log.warning(
            "could not build %s (%s): the stream job's checkpoint sets file permissions "
            "with a chmod process per file",
            LOCAL_FILE_SYSTEM,
            detail,
        )
        return {}
    return {
        "spark.hadoop.fs.file.impl": LOCAL_FILE_SYSTEM,
        # Both: on a Spark cluster the executors write the state store's files.
        "spark.driver.extraClassPath": str(jar),
        "spark.executor.extraClassPath": str(jar),
    }
