"""The JVM software of local runs, resolved from the project's Maven build (``jvm/``).

Each component (``jvm/<name>/pom.xml``) resolves into a folder of its own,
``var/jvm/<name>/lib``, and runs on that folder alone: the Kafka broker needs
kafka-clients 4.x, Spark's connector the 3.9 its POM declares, Pinot its own, so one
flat classpath would keep only one of them. The first use runs Maven (its cache under
``~/.m2`` makes later runs offline); the folder is resolved again when its POM changes.
No other download happens at run time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from runtime.conf import BASE_DIR, env_str

JVM_DIR = BASE_DIR / "jvm"


def resolved_dir() -> Path:
    """Where components resolve to: the checkout's ``var/jvm`` (not ``ORDERTRACK_VAR_DIR``,
    which a production-like run points elsewhere: one resolution serves every mode)."""
    return Path(env_str("ORDERTRACK_JVM_DIR", str(BASE_DIR / "var" / "jvm")))


class MavenError(RuntimeError):
    """Maven could not resolve a component's jars."""


def pom(component: str) -> Path:
    path = JVM_DIR / component / "pom.xml"
    if not path.exists():
        raise FileNotFoundError(f"no Maven build for {component!r} at {path}")
    return path


def _mvn() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise MavenError(
            "Maven (mvn) is not installed: run `make install` (bash .ci/system-deps.sh)"
        )
    return found


def lib_dir(component: str) -> Path:
    """``component``'s jars, resolved now unless already resolved from its current POM."""
    source = pom(component)
    target = resolved_dir() / component / "lib"
    stamp = target / ".pom-sha256"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staged = Path(tmp, "lib")
        command = [
            _mvn(),
            "--batch-mode",
            "--quiet",
            "--file",
            str(source),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staged}",
            "-DincludeScope=runtime",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()[-3000:]
            raise MavenError(
                f"Maven could not resolve jvm/{component} ({' '.join(command)}):\n{output}"
            )
        staged.mkdir(exist_ok=True)
        (staged / ".pom-sha256").write_text(digest)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)  # whole, or not at all, for a process starting beside this one
    return target


def jars(component: str) -> list[Path]:
    """Every jar of ``component``, sorted by name."""
    return sorted(lib_dir(component).glob("*.jar"))


def classpath(component: str) -> str:
    """``component``'s classpath for ``java -cp``."""
    return os.pathsep.join(str(jar) for jar in jars(component))


def java() -> str:
    """The ``java`` of ``JAVA_HOME`` (JDK 17 here), else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise FileNotFoundError("no java on PATH or in JAVA_HOME: run `make install`")
    return found


if __name__ == "__main__":  # `python -m jvm.maven kafka spark-kafka`: resolve ahead of use
    import sys

    for name in sys.argv[1:] or sorted(p.parent.name for p in JVM_DIR.glob("*/pom.xml")):
        print(f"{name}: {len(jars(name))} jars in {lib_dir(name)}")
