#!/usr/bin/env bash
# make demo: coven's main job end to end on file:// storage, in a temporary folder removed
# afterwards (set COVEN_DEMO_KEEP=1 to keep it).
#
#   1. build coven in release mode;
#   2. write a manifest: an app namespace, a user namespace and a table with a file column;
#   3. coven init --storage file://$DEMO/store: the store, its first member (you) and this device;
#   4. coven stage a sample file (app bytes) and prepare a person's original (--user);
#   5. coven write rows that reference both, in one transaction;
#   6. coven upload-worker --once: encrypt and store them under $DEMO/store/files/;
#   7. coven cat a byte range back and compare it with the source;
#   8. coven sync; a second device of the same member joins with its identity, reads the file
#      and edits a row,
#      which travels back;
#   9. the laptop deletes that row: it goes to the trash, which keeps its bytes for the store's
#      window (30 days); the trash emptied, coven gc there deletes its stored bytes once the
#      first device has synced (and never a person's original);
#  10. coven status, then coven status --json.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

step "build (swift build -c release --static-swift-stdlib, as make build does)"
swift build -c release --static-swift-stdlib >&2
coven="$PWD/.build/release/coven"

DEMO=$(mktemp -d "${TMPDIR:-/tmp}/coven-demo.XXXXXX")
if [[ ${COVEN_DEMO_KEEP-} != 1 ]]; then trap 'rm -rf "$DEMO"' EXIT; fi
export COVEN_DB="$DEMO/device/device.db"
cd "$DEMO"
echo "demo folder: $DEMO" >&2

step "manifest"
cat > coven.json <<'JSON'
{
  "namespaces": [
    { "name": "attachments", "kind": "app", "budget": "256MiB" },
    { "name": "music", "kind": "user", "kept": true }
  ],
  "tables": [
    { "name": "songs", "identity": "uuid", "files": [ { "column": "file" } ] }
  ],
  "migrations": [
    "CREATE TABLE songs (id TEXT PRIMARY KEY, title TEXT NOT NULL, file TEXT, _updated_at TEXT NOT NULL) STRICT"
  ]
}
JSON
cat coven.json

step "coven init --storage file://$DEMO/store --manifest coven.json"
"$coven" init --storage "file://$DEMO/store" --manifest coven.json --name demo

step "sample files: 3 MiB of app bytes and a person's original with a Latin-1 name"
head -c $((3 * 1024 * 1024 + 12345)) /dev/urandom > sample.bin
mkdir -p Music
original=$'Music/Caf\xe9.flac'
head -c 200000 /dev/urandom > "$original"

step "coven stage sample.bin --namespace attachments"
staged=$("$coven" stage sample.bin --namespace attachments)
echo "$staged"
step "coven stage --user Music/Caf\\xE9.flac --namespace music"
prepared=$("$coven" stage --user "$original" --namespace music)
echo "$prepared"

step "coven write: two rows referencing them, one transaction"
"$coven" write --param staged="$staged" --param prepared="$prepared" "
  INSERT INTO songs (id, title, file, _updated_at)
    VALUES (coven_uuid7(), 'app bytes', coven_put_staged(:staged), coven_stamp());
  INSERT INTO songs (id, title, file, _updated_at)
    VALUES (coven_uuid7(), 'an original', coven_put_user_file('music', :prepared, 'cloud'), coven_stamp());
" | tee ids.txt
file=$("$coven" sql "SELECT file FROM songs WHERE title = 'app bytes'")

step "coven sql: the queue before uploading"
"$coven" sql "SELECT file, waiting_for, bytes_total FROM coven_uploads"
"$coven" sql "SELECT coven_path_text(path), size FROM coven_user_files"

step "coven upload-worker --once"
"$coven" upload-worker --once

step "the store holds only random names"
find store -type f | sort

step "coven cat $file --offset 1000000 --length 70000 (a range across two chunks)"
"$coven" cat "$file" --offset 1000000 --length 70000 > range.bin
dd if=sample.bin iflag=skip_bytes,count_bytes skip=1000000 count=70000 status=none | cmp - range.bin
echo "the range matches the source ($(wc -c < range.bin) bytes)"

step "coven cat $file (whole file)"
"$coven" cat "$file" | cmp - sample.bin && echo "the whole file matches the source"

step "coven file-status $file"
"$coven" file-status "$file"

step "coven sync: publish this device's rows as sealed, signed changes"
"$coven" sync

step "a second device: coven join as the same member (its identity), then read the file there"
(umask 077 && "$coven" key export > me.identity)
"$coven" --quiet join "file://$DEMO/store" --identity me.identity --name laptop --db "$DEMO/laptop/device.db"
"$coven" sql --db "$DEMO/laptop/device.db" "SELECT title FROM songs ORDER BY title"
"$coven" cat "$file" --db "$DEMO/laptop/device.db" | cmp - sample.bin && echo "the laptop reads the same bytes from storage"

step "an edit on the laptop travels back"
"$coven" write --db "$DEMO/laptop/device.db" "UPDATE songs SET title = 'renamed on the laptop', _updated_at = coven_stamp() WHERE title = 'app bytes'"
"$coven" sync --db "$DEMO/laptop/device.db"
"$coven" sync
"$coven" sql "SELECT title FROM songs ORDER BY title"
"$coven" devices

step "a delete on the laptop: the row goes to the trash, which keeps its bytes for 30 days"
"$coven" write --db "$DEMO/laptop/device.db" "DELETE FROM songs WHERE title = 'renamed on the laptop'"
"$coven" trash --db "$DEMO/laptop/device.db"
"$coven" gc --db "$DEMO/laptop/device.db"
step "the trash emptied, coven gc deletes the stored bytes once both devices have seen the delete"
"$coven" sync
"$coven" trash empty --all --db "$DEMO/laptop/device.db"
"$coven" gc --db "$DEMO/laptop/device.db"
ls Music/ && echo "the person's original is untouched"

step "coven status"
"$coven" status
step "coven status --json"
"$coven" status --json
echo >&2
echo "demo: done" >&2
