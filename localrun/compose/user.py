"""Who each process of ``make run-prod`` runs as: the image's unprivileged user.

When started as root, every process drops to the ``ordertrack`` system user
(``.ci/system-deps.sh`` creates it), as the image's ``USER ordertrack`` does; the
repository and the venv stay root-owned, so SPARK_HOME is read-only to them. Where
that user cannot run the venv's interpreter (a pyenv Python under ``/root``, as on
these machines), PostgreSQL and Redis still drop to it, the Python processes stay
root, and the Spark Master and Worker run in a private mount namespace whose
SPARK_HOME is a read-only bind mount: what broke in the image (a Worker writing
``$SPARK_HOME/work``) breaks here too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from localrun.compose.plan import base_env, spark_home
from runtime.conf import BASE_DIR

RUN_USER = "ordertrack"


def privileges() -> list[str]:
    """The prefix that drops root to the unprivileged user (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        import pwd

        pwd.getpwnam(RUN_USER)
    except KeyError:
        raise SystemExit(f"user {RUN_USER!r} missing: run `bash .ci/system-deps.sh`") from None
    return ["setpriv", f"--reuid={RUN_USER}", f"--regid={RUN_USER}", "--init-groups", "--"]


_VENV_OK: bool | None = None


def venv_usable_by_run_user() -> bool:
    """Can the unprivileged user run this venv's Python (and so PySpark's Python workers)?

    Not when the venv's interpreter lives under a root-only home (pyenv in /root, as on
    the CI machines): then the Python processes stay root and only the JVMs are confined.
    """
    global _VENV_OK
    if _VENV_OK is None:
        prefix = privileges()
        if not prefix:
            _VENV_OK = True
        else:
            # The same lookup the processes do: `python` on the image's PATH.
            probe = subprocess.run(
                [*prefix, "python", "-c", "import pyspark, pandas, django, confluent_kafka"],
                capture_output=True,
                env={"PATH": base_env(BASE_DIR / "var")["PATH"]},
            )
            _VENV_OK = probe.returncode == 0
    return _VENV_OK


def read_only_spark_home() -> list[str]:
    """Root in a private mount namespace whose SPARK_HOME is a read-only bind mount.

    The image's Spark processes cannot write SPARK_HOME (site-packages, owned by root);
    when they cannot drop to the unprivileged user here, this keeps that property.
    """
    home = str(spark_home())
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    prefix = ["unshare", "--mount", "--", "sh", "-c", script, home]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        # No CAP_SYS_ADMIN (a restricted container): run them as they are, and say so.
        print(
            "prod: cannot make SPARK_HOME read-only here (unshare/mount refused)", file=sys.stderr
        )
        return []
    return prefix


def prefix_for(name: str) -> list[str]:
    """How a process of role ``name`` is started (see the module docstring)."""
    if name in ("postgres", "redis", "proxy") or venv_usable_by_run_user():
        return privileges()
    if name in ("spark-master", "spark-worker") and os.geteuid() == 0:
        return read_only_spark_home()
    return []


def prepare_dirs(var: Path) -> None:
    """The run's folders, owned by the unprivileged user (PostgreSQL's private to it)."""
    for sub in ("postgres", "run", "app", "home", "lib/spark-work", "lib/checkpoints"):
        (var / sub).mkdir(parents=True, exist_ok=True)
    (var / "postgres").chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(var, RUN_USER, RUN_USER)
        for path in var.rglob("*"):
            with contextlib.suppress(FileNotFoundError):
                os.lchown(path, *run_ids())


def run_ids() -> tuple[int, int]:
    """The unprivileged user's uid and gid."""
    import pwd

    entry = pwd.getpwnam(RUN_USER)
    return entry.pw_uid, entry.pw_gid
