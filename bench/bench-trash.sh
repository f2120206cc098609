#!/usr/bin/env bash
# The trash (issue 37, "Numbers"), in one run on file://:
#
#   1. `coven trash --json` of 100,000 deleted rows: target < 1 s and peak RSS <= 64 MiB
#      (streamed: never every row in memory).
#   2. `coven undelete --change` of a change that deleted 10,000 rows each naming a stored file,
#      beside the `write` that inserted them: target <= 2x.
#   3. a quiet `coven sync` makes the same requests with 100,000 rows in the trash as with
#      none (file operations on the store counted by strace; SyncRequestTests and TrashTests
#      assert the request list).
#   4. `coven sync --pull` of a change deleting 100,000 rows, with the trash and without: the
#      same device copied before the pull, the copy's trash turned off (`coven trash retention
#      0`, a store setting written there and not published), the same change pulled from the
#      same store on the same filesystem, each from a fresh copy, `sync` before each run:
#      target <= 1.1x.
#
# Figures, 2026-12-04 (tenth session), quiet machine (load 1.0), one run of this script, on disk
# (ext4), five runs each: trash --json 0.758 s 32.5 MiB; undelete --change 0.926 s, 0.95x the
# write of 0.970 s; a quiet sync 19 store operations with 100,000 rows in the trash and with none;
# the pull 1.225 s 62.0 MiB, without the trash 1.206 s 61.6 MiB: 1.02x (target 1.1x).
# How it got there (schema 24, the trash in pages): before, a row per trashed row (its image of
# about 330 bytes, stamp, device, key and index entries) made the pull 1.41-1.44x; in plain SQL
# (Python's sqlite3, WAL, synchronous FULL, the pull's four transactions) the deletes and
# tombstones took 0.86 s, with a row per image 1.42-1.59 s, with the images in pages of one
# change 0.93-0.96 s uncompressed: the images' bytes and per-row inserts were the cost, not
# coven's code. Now the images of the rows one change deletes are encoded into pages of 128 KiB,
# zstd level 1 (about 8:1 on these rows), sealed on the other core while the pull goes on, and
# each row's tombstone (written by every delete anyway) names its page: nothing is written per
# row for the trash. perf of the pull with the trash, sealing inline: Trash.record 5% of the
# samples, libzstd 4.7% (1.17x); sealed on their own thread, 1.02-1.04x. trash --json walks rows newest first, then by table, page and id, a
# few decoded pages kept (by table and id alone it decoded a page per row: 73 s).
#
# hyperfine medians of BENCH_TRASH_RUNS runs (default 5), each from the same starting state.
# Environment: COVEN and BENCH_TMP from bench/run.sh; BENCH_TRASH_ROWS (100000) and
# BENCH_TRASH_FILES (10000) change the counts. Fails when a target is missed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rows=${BENCH_TRASH_ROWS:-100000}
files=${BENCH_TRASH_FILES:-10000}
runs=${BENCH_TRASH_RUNS:-5}
bench_start trash
items_manifest
item_rows "$rows"
status=0
restore() { rm -rf "$T/$1" && cp -a "$T/$1.before" "$T/$1"; }
export -f restore
export T

echo "-- setup: a writes $rows rows, b pulls them, a deletes them all and publishes the delete"
"$COVEN" --quiet init --storage "file://$T/store" --manifest coven.json --name a --db "$T/a/device.db" >/dev/null
"$COVEN" key export --db "$T/a/device.db" > key.txt
"$COVEN" --quiet join "file://$T/store" --key-file key.txt --name b --db "$T/b/device.db" >/dev/null
"$COVEN" write --db "$T/a/device.db" - < coven.sql >/dev/null
"$COVEN" --quiet sync --db "$T/a/device.db"
"$COVEN" --quiet sync --db "$T/b/device.db"
"$COVEN" --db "$T/a/device.db" write "DELETE FROM items" >/dev/null
"$COVEN" --quiet sync --push --db "$T/a/device.db"
for d in a b; do sqlite3 "$T/$d/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null; done
cp -a b b.before && cp -a store store.before
# The same device without the trash: its window set to 0 (nothing else differs).
cp -a b b0.before
"$COVEN" --db "$T/b0.before/device.db" trash retention 0 >/dev/null
sqlite3 "$T/b0.before/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null

echo
echo "-- 1. trash --json of $rows deleted rows"
/usr/bin/time -v -o rss-trash.txt "$COVEN" --db "$T/a/device.db" trash --json > trash.json 2>/dev/null
listed=$(python3 -c "import json, sys; print(len(json.load(open(sys.argv[1]))))" trash.json)
[[ $listed == "$rows" ]] || { echo "bench-trash: trash --json listed $listed rows, not $rows" >&2; exit 1; }
hyperfine --style basic --runs "$runs" --warmup 1 --export-json trash.json.hf "$COVEN --db $T/a/device.db trash --json > /dev/null"
trash_secs=$(median 0 trash.json.hf)
trash_rss=$(peak rss-trash.txt)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1 and float(sys.argv[2]) <= 64 else 1)" "$trash_secs" "$trash_rss" || status=1

echo
echo "-- 3. a quiet sync's requests, with $rows rows in b's trash and with none"
"$COVEN" --quiet sync --pull --db "$T/b/device.db" 2>/dev/null
count_requests() {
    strace -f -qq -e trace=%file,getdents64 -o "$T/strace.txt" "$COVEN" --quiet sync --db "$1" >/dev/null
    grep -c "$T/store" "$T/strace.txt" || true
}
"$COVEN" --quiet sync --db "$T/b/device.db" 2>/dev/null
with_trash=$(count_requests "$T/b/device.db")
"$COVEN" --db "$T/b/device.db" --quiet trash empty --all
without_trash=$(count_requests "$T/b/device.db")
[[ $with_trash == "$without_trash" ]] || status=1

echo
echo "-- 4. sync --pull of a change deleting $rows rows, with the trash and without (retention 0)"
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json pull.json \
    --command-name "coven sync --pull (trash)" --prepare "restore b; restore store; sync" "$COVEN sync --pull --db $T/b/device.db > /dev/null 2>&1" \
    --command-name "coven sync --pull (retention 0)" --prepare "restore b0; restore store; sync" "$COVEN sync --pull --db $T/b0/device.db > /dev/null 2>&1"
restore b; restore store; sync
/usr/bin/time -v -o rss-pull.txt "$COVEN" --quiet sync --pull --db "$T/b/device.db" 2>/dev/null
kept=$(sqlite3 "$T/b/device.db" "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL")
[[ $kept == "$rows" ]] || { echo "bench-trash: b's trash holds $kept rows, not $rows" >&2; exit 1; }
restore b0; restore store; sync
/usr/bin/time -v -o rss-pull0.txt "$COVEN" --quiet sync --pull --db "$T/b0/device.db" 2>/dev/null
kept0=$(sqlite3 "$T/b0/device.db" "SELECT count(*) FROM coven_tombstones WHERE trash IS NOT NULL")
left0=$(sqlite3 "$T/b0/device.db" "SELECT count(*) FROM items")
[[ $kept0 == 0 && $left0 == 0 ]] || { echo "bench-trash: without the trash, b0 holds $kept0 trashed and $left0 live rows" >&2; exit 1; }
pull=$(median 0 pull.json)
baseline=$(median 1 pull.json)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.1 * float(sys.argv[2]) else 1)" "$pull" "$baseline" || status=1

echo
echo "-- 2. undelete --change of $files rows with files, beside the write that inserted them"
F=$T/files
mkdir -p "$F"
cat > "$F/coven.json" <<'JSON'
{
  "namespaces": [ { "name": "tracks", "kind": "user" } ],
  "tables": [ { "name": "tracks", "identity": "uuid", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE tracks (id TEXT PRIMARY KEY, title TEXT, file TEXT, _updated_at TEXT NOT NULL) STRICT" ]
}
JSON
tiny_files "$F/src" "$files"
"$COVEN" --quiet init --storage "file://$F/store" --manifest "$F/coven.json" --name fa --db "$F/fa/device.db" >/dev/null
(cd "$F" && find src -type f -print0 > list0)
(cd "$F" && "$COVEN" --db fa/device.db --json stage --user --namespace tracks --files-from list0 -z > staged.jsonl)
sqlite3 "$F/fa/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp -a "$F/fa" "$F/fa.staged"
write_secs() {
    rm -rf "$F/fa" && cp -a "$F/fa.staged" "$F/fa"
    /usr/bin/time -f '%e' -o "$T/write.time" bash -c "cd '$F' && '$COVEN' --db fa/device.db write --each staged.jsonl \
        \"INSERT INTO tracks (id, title, file, _updated_at) VALUES (coven_uuid7(), :path, coven_put_user_file('tracks', :id, 'cloud'), coven_stamp())\" >/dev/null"
    cat "$T/write.time"
}
write_runs=()
for _ in $(seq "$runs"); do write_runs+=("$(write_secs)"); done
write=$(python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "${write_runs[@]}")
"$COVEN" --quiet --db "$F/fa/device.db" upload-worker --once
"$COVEN" --quiet --db "$F/fa/device.db" sync
"$COVEN" --db "$F/fa/device.db" write "DELETE FROM tracks" >/dev/null
"$COVEN" --quiet --db "$F/fa/device.db" sync
change=$("$COVEN" --db "$F/fa/device.db" trash | awk -F"\t" "NR == 1 { print \$4 }")
sqlite3 "$F/fa/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp -a "$F/fa" "$F/fa.deleted"
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json undelete.json \
    --command-name "coven undelete --change ($files rows with files)" --prepare "rm -rf $F/fa && cp -a $F/fa.deleted $F/fa" \
    "$COVEN --db $F/fa/device.db undelete --change $change > /dev/null"
undelete=$(median 0 undelete.json)
back=$(sqlite3 "$F/fa/device.db" "SELECT count(*) FROM tracks t JOIN coven_files f ON f.id = t.file")
[[ $back == "$files" ]] || { echo "bench-trash: $back of $files rows came back with their files" >&2; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 2 * float(sys.argv[2]) else 1)" "$undelete" "$write" || status=1
rm -rf "$F"

echo
echo "== trash figures"
printf 'trash --json, %s rows:          %.3f s (target < 1)   peak RSS %s MiB (target <= 64)\n' "$rows" "$trash_secs" "$trash_rss"
printf 'write of %s rows with files:     %.3f s\n' "$files" "$write"
printf 'undelete --change of them:         %.3f s  (%sx the write; target <= 2x)\n' "$undelete" "$(ratio "$undelete" "$write")"
printf 'quiet sync, store operations:      %s with %s rows in the trash, %s with none (target: equal)\n' "$with_trash" "$rows" "$without_trash"
printf 'sync --pull of %s deletes:      %.3f s   peak RSS %s MiB\n' "$rows" "$pull" "$(peak rss-pull.txt)"
printf '  without the trash (retention 0): %.3f s   peak RSS %s MiB  (%sx; target <= 1.1x)\n' "$baseline" "$(peak rss-pull0.txt)" "$(ratio "$pull" "$baseline")"
exit $status
