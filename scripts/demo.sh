#!/usr/bin/env bash
# make demo: coven's main job end to end on file:// storage, in a temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."

cat <<'PLAN'
make demo will, in a temporary folder removed afterwards:
  1. build coven in release mode (swift build -c release);
  2. write a manifest declaring an app namespace and a table with a file column;
  3. coven init --storage file://$DEMO/store --manifest coven.json, creating the store and this device;
  4. coven stage the namespace a sample file, printing its id;
  5. coven write a row that references it;
  6. coven upload-worker --once, encrypting and storing it under $DEMO/store/files/;
  7. coven cat the id with --offset and --length, reading a range back;
  8. coven status, then coven status --json.
PLAN
echo "demo: the steps above are not wired up yet"
