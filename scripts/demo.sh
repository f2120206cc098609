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

swift build -c release
coven=$(pwd)/.build/release/coven
DEMO=$(mktemp -d "${TMPDIR:-/tmp}/coven-demo.XXXXXX")
trap 'rm -rf "$DEMO"' EXIT
export COVEN_DB=$DEMO/device/device.db
cd "$DEMO"

step() { printf '\n== %s\n' "$*"; }
# A command this build may not have yet (each capability lands on its own).
has() { "$coven" help "$1" >/dev/null 2>&1; }

step "2. the manifest"
cat > coven.json <<'EOF'
{
  "namespaces": [ { "name": "documents", "kind": "app", "budget": "64MiB" } ],
  "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "attachment" } ] } ],
  "migrations": [
    "CREATE TABLE notes (id TEXT PRIMARY KEY, title TEXT, attachment TEXT, _updated_at TEXT NOT NULL) STRICT"
  ]
}
EOF
cat coven.json

step "3. coven init"
"$coven" init --storage "file://$DEMO/store" --manifest coven.json --name demo

step "4. coven stage"
printf 'Hello from coven: this line is the sample file, and these are its bytes.\n' > sample.txt
staged=$("$coven" stage sample.txt --namespace documents)
echo "staged $staged"

step "5. coven write"
file=$("$coven" write --param staged="$staged" \
    "INSERT INTO notes (id, title, attachment, _updated_at) VALUES (coven_uuid7(), 'A sample', coven_put_staged(:staged), coven_stamp())")
echo "file $file"
"$coven" sql "SELECT n.title, f.size FROM notes AS n JOIN coven_files AS f ON f.id = n.attachment"

step "6. coven upload-worker --once"
if has upload-worker; then
    "$coven" upload-worker --once
    find store/files -type f
else
    echo "(this build has no upload-worker yet: the file stays queued)"
fi

step "7. coven cat --offset 6 --length 11"
if has cat; then
    "$coven" cat "$file" --offset 6 --length 11
    echo
else
    echo "(this build has no cat yet)"
fi

step "8. coven status"
"$coven" status
"$coven" --json status
