#!/usr/bin/env bash
# Debian packages the project needs beyond Python wheels: a Java runtime for PySpark
# and Apache Kafka, its compiler for the one Java class of local runs (jvm/hadoop.py),
# Maven for the JVM parts (jvm/*/pom.xml), Chromium
# for the browser tests, Prometheus for the alert-rule tests, and PostgreSQL + Redis for
# the production path (`make run-prod`, and the PostgreSQL/Redis tests `make test` runs).
# Installs only what is missing.
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
# Maven resolves the JVM parts (jvm/*/pom.xml: Apache Kafka, Spark's Kafka connector).
command -v mvn >/dev/null 2>&1 || need+=(maven)
[ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ] || need+=(chromium)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
# Run as ordinary processes by localrun/compose/ (initdb under var/); no service is started.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# promtool checks and unit-tests the alert rules; prometheus scrapes the embedded system
# in one test (run as an ordinary process, like PostgreSQL).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing system packages: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
java -version 2>&1 | head -1

# The Spark Master/Worker of the production-like run drop root to this system user, as the
# compose image runs them as a non-root user (localrun/compose/user.py).
if [ "$(id -u)" -eq 0 ] && ! id ordertrack >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ordertrack
fi
