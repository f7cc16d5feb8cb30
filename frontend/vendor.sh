#!/usr/bin/env bash
# Install the frontend's npm packages (package-lock.json, exact versions) and copy the
# files the pages use into frontend/static/vendor/, served by Django like any static
# file: nothing is fetched from a CDN at run time.
#
# Idempotent and fast when already done: it does nothing if the lock file has not
# changed since the last successful run (stamp in static/vendor/.stamp).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
vendor="static/vendor"
stamp="$vendor/.stamp"
lock_sum="$(sha256sum package-lock.json vendor.sh | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$lock_sum" && -d node_modules/leaflet ]]; then
  exit 0
fi

command -v npm >/dev/null || { echo "vendor.sh: npm is required (node 18+)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error

rm -rf "$vendor"
mkdir -p "$vendor/leaflet"
# Leaflet: the ES module build (imported by our modules), its CSS and marker images.
cp node_modules/leaflet/dist/leaflet-src.esm.js node_modules/leaflet/dist/leaflet-src.esm.js.map node_modules/leaflet/dist/leaflet.css "$vendor/leaflet/"
cp -r node_modules/leaflet/dist/images "$vendor/leaflet/images"
cp node_modules/leaflet/LICENSE "$vendor/leaflet/LICENSE"
# axe-core: the accessibility engine the browser tests inject (not used by the pages).
mkdir -p "$vendor/axe-core"
cp node_modules/axe-core/axe.min.js node_modules/axe-core/LICENSE "$vendor/axe-core/"

echo "$lock_sum" > "$stamp"
echo "vendor.sh: vendored leaflet $(node -p 'require("./node_modules/leaflet/package.json").version'), axe-core $(node -p 'require("./node_modules/axe-core/package.json").version') into frontend/$vendor"
