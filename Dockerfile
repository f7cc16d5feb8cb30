# syntax=docker/dockerfile:1.7
# The Ordertrack application image: Django (ASGI server, workers, one-shot jobs), the
# Spark streaming driver *and* the Spark master/worker processes.
#
# Why one image for the Spark cluster too, rather than the official apache/spark image:
# PySpark requires the driver and the executors' Python workers to run the same Python
# minor version with the same packages. The order join (streaming.enrich,
# contract.events) runs inside executors, so they need this
# repository's code plus pandas/pyarrow/protobuf at the pinned versions. The official
# image ships its own Python (not 3.11) and none of our packages, so we would build a
# second image on top of it anyway. Here the pip-installed pyspark (pinned in
# requirements.txt) *is* the Spark distribution: its bin/spark-class starts the
# standalone master and worker, its bin/spark-submit submits the job, and the JVM
# side can never drift from the Python side. OpenJDK 17 is Debian bookworm's JRE.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:22-bookworm-slim
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17

# ---- browser assets (git-ignored, vendored from npm by frontend/vendor.sh) ----------
FROM ${NODE_IMAGE} AS frontend
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json frontend/vendor.sh ./
RUN bash vendor.sh

# ---- JVM parts (jvm/*/pom.xml: Spark's Kafka connector), resolved from Maven Central ----
FROM ${MAVEN_IMAGE} AS jvm
WORKDIR /src
COPY jvm/spark-kafka/pom.xml jvm/spark-kafka/pom.xml
RUN mvn --batch-mode --quiet --file jvm/spark-kafka/pom.xml dependency:copy-dependencies \
        -DoutputDirectory=/src/var/jvm/spark-kafka/lib -DincludeScope=runtime \
    && sha256sum jvm/spark-kafka/pom.xml | cut -d' ' -f1 | tr -d '\n' > /src/var/jvm/spark-kafka/lib/.pom-sha256

# ---- application ----------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# procps: Spark's launch scripts call `ps`. The JRE runs the Spark driver/master/worker.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY . .
COPY --from=frontend /src/frontend/static/vendor ./frontend/static/vendor
COPY --from=jvm /src/var/jvm ./var/jvm

# spark-submit needs a script path; streaming/__main__.py uses package-relative imports,
# so this two-line entry point runs it as the package `streaming` (same code as
# `python -m streaming`).
COPY <<'PY' /opt/ordertrack/streaming_main.py
import sys
from streaming.__main__ import main
sys.exit(main())
PY

ENV PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=config.settings \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PATH=/usr/local/lib/python3.11/site-packages/pyspark/bin:$PATH

# Static files are collected at build time (WhiteNoise serves them when DEBUG is off).
# /var/lib/ordertrack holds the named volumes (Spark checkpoints, the workers' work folders): creating
# the folders here makes fresh volumes owned by the unprivileged user.
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /app --shell /usr/sbin/nologin ordertrack \
    && DJANGO_DEBUG=true python manage.py collectstatic --noinput --verbosity 0 \
    && mkdir -p /var/lib/ordertrack/checkpoints /var/lib/ordertrack/spark-work /app/var \
    && chown -R ordertrack:ordertrack /app/var /var/lib/ordertrack

# Safe by default when run on its own: debug off, so Django refuses to start until
# DJANGO_SECRET_KEY (and DJANGO_ALLOWED_HOSTS) are given; compose sets them all.
ENV DJANGO_DEBUG=false

USER ordertrack
EXPOSE 8000
# Every service in docker-compose.yml sets its own command; this default is the web tier.
# X-Forwarded-For/-Proto are believed only from uvicorn's default, 127.0.0.1 (a proxy in
# the same network namespace); FORWARDED_ALLOW_IPS names another proxy's address. Never
# "*": any client could then choose the address its throttles count.
# --ws-max-size: WS_MAX_MESSAGE_BYTES's default (a larger client frame is closed with 1009).
CMD ["uvicorn", "config.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers", "--ws-max-size", "4096", "--no-access-log"]
