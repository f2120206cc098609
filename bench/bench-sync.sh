#!/usr/bin/env bash
# Sync (issue 14, "Performance"), side by side with the raw limit, in one run:
#
#   1. 100,000 rows of about 200 bytes inserted on one device, `coven sync --push` there, and
#      `coven sync --pull` on a second device, on file://, each against the same rows inserted
#      into an empty copy of the table by sqlite3 in one transaction (the raw limit): target
#      pull <= 3x raw, push <= 2x raw; peak RSS <= 64 MiB for both.
#   2. the bytes published for those rows against `zstd -3` of the same rows as CSV: <= 1.3x.
#   3. a quiet `coven sync` with 10 devices on file://: <= 50 ms (the request count, at most
#      one per device plus one listing of devices/, is asserted by SyncRequestTests).
#   4. the same push and pull through moto (the signature-checking S3 server): reported.
#   5. 100,000 rows each naming a file (originals of a few bytes, staged, written and uploaded
#      in one run each) on file://: the push of their records, the pull on a device joined
#      before, a join after (pulling every change) and a join from a snapshot: time and peak
#      RSS of each, target <= 64 MiB; every device ends with every row and record, no lost value.
#   6. `lost --json` of 10,000 lost values (two devices changing the same rows): target < 1 s
#      and peak RSS <= 64 MiB.
#
# hyperfine medians of BENCH_SYNC_RUNS runs (default 5), each run from the same starting state
# (the device databases and the store copied back by --prepare). Environment: COVEN and
# BENCH_TMP from bench/run.sh; BENCH_SYNC_ROWS changes the row count, BENCH_SYNC_FILES the file
# records' (5), BENCH_SYNC_LOST the lost values' (6). Sections 5 and 6 fail the script when a
# target is missed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rows=${BENCH_SYNC_ROWS:-100000}
files=${BENCH_SYNC_FILES:-100000}
lost_count=${BENCH_SYNC_LOST:-10000}
runs=${BENCH_SYNC_RUNS:-5}
bench_start sync
items_manifest

# The rows: canonical UUIDv7-shaped ids, about 200 bytes each.
item_rows "$rows"
echo "$rows rows, $(stat -c %s rows.csv) bytes as CSV"

echo
echo "-- setup: device a writes the rows in one write; device b joins the empty store"
"$COVEN" --quiet init --storage "file://$T/store" --manifest coven.json --name a --db "$T/a/device.db" >/dev/null
"$COVEN" key export --db "$T/a/device.db" > key.txt
"$COVEN" --quiet join "file://$T/store" --key-file key.txt --name b --db "$T/b/device.db" >/dev/null
/usr/bin/time -o write.time -f "%e s, peak RSS %M KiB" "$COVEN" write --db "$T/a/device.db" - < coven.sql >/dev/null
# Starting states, copied back before each timed run.
sqlite3 "$T/a/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
sqlite3 "$T/b/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp -a a a.before && cp -a b b.before && cp -a store store.before
restore() { rm -rf "$T/$1" && cp -a "$T/$1.before" "$T/$1"; }
export -f restore
export T

echo
echo "-- 1. push, pull and the raw limit (sqlite3, one transaction into an empty table)"
# The pull's starting state: the store as the push leaves it.
"$COVEN" sync --push --db "$T/a/device.db" > /dev/null
rm -rf store.pushed && cp -a store store.pushed
restore a; restore store
# Each run starts with nothing dirty in the page cache (`sync` in --prepare): neither tool's
# syncs write back what the copies of the last --prepare left; each pays its own (sqlite3's
# journal and database fsyncs at its commit, coven's WAL syncs at each change's).
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json sync.json \
    --command-name "sqlite3 raw insert" --prepare "rm -f $T/raw.db && sqlite3 $T/raw.db \"$table\" && sync" "sqlite3 $T/raw.db < $T/raw.sql" \
    --command-name "coven sync --push" --prepare "restore a; restore store; sync" "$COVEN sync --push --db $T/a/device.db > /dev/null" \
    --command-name "coven sync --pull" --prepare "restore b; rm -rf $T/store && cp -a $T/store.pushed $T/store; sync" "$COVEN sync --pull --db $T/b/device.db > /dev/null"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
raw=$(median 0 sync.json); push=$(median 1 sync.json); pull=$(median 2 sync.json)
restore a; restore b; restore store
/usr/bin/time -v "$COVEN" sync --push --db "$T/a/device.db" > /dev/null 2> rss-push.txt
/usr/bin/time -v "$COVEN" sync --pull --db "$T/b/device.db" > /dev/null 2> rss-pull.txt
echo "write of the $rows rows (one coven write, for reference): $(cat write.time)"
pulled=$(sqlite3 "$T/b/device.db" "SELECT count(*) FROM items")
[[ $pulled == "$rows" ]] || { echo "bench-sync: b holds $pulled rows, not $rows" >&2; exit 1; }

echo
echo "-- 2. bytes published against zstd -3 of the same rows as CSV"
published=$(find store/changes -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
zstd -3 -q -c rows.csv > rows.csv.zst
csvz=$(stat -c %s rows.csv.zst)

echo
echo "-- 3. a quiet sync with 10 devices"
for i in $(seq 3 10); do "$COVEN" --quiet join "file://$T/store" --key-file key.txt --name "d$i" --db "$T/d$i/device.db" >/dev/null; done
"$COVEN" sync --db "$T/a/device.db" >/dev/null; "$COVEN" sync --db "$T/b/device.db" >/dev/null
load_quiet=$(cut -d' ' -f1-3 /proc/loadavg)
hyperfine -N --style basic --runs 20 --warmup 2 --export-json quiet.json "$COVEN sync --db $T/b/device.db"
quiet=$(median 0 quiet.json)
quiet_cpu=$(jq -r '.results[0].user + .results[0].system' quiet.json)

echo
echo "-- 4. the same push and pull through moto"
moto_push=skipped; moto_pull=skipped
if start_moto coven-sync; then
    url="s3://coven-sync/store?endpoint=$AWS_ENDPOINT_URL&path_style=true"
    "$COVEN" --quiet init --storage "$url" --manifest coven.json --name ma --db "$T/ma/device.db" >/dev/null
    "$COVEN" key export --db "$T/ma/device.db" > mkey.txt
    "$COVEN" --quiet join "$url" --key-file mkey.txt --name mb --db "$T/mb/device.db" >/dev/null
    "$COVEN" write --db "$T/ma/device.db" - < coven.sql >/dev/null
    start=$(now); "$COVEN" sync --push --db "$T/ma/device.db" >/dev/null; end=$(now)
    moto_push=$(elapsed "$start" "$end")
    start=$(now); "$COVEN" sync --pull --db "$T/mb/device.db" >/dev/null; end=$(now)
    moto_pull=$(elapsed "$start" "$end")
else
    echo "moto did not start ($(tail -1 "$T/s3.log")): skipped"
fi

echo
echo "-- 5. $files file records: push, join, pull and join from a snapshot"
# A user namespace of originals of a few bytes each: staged in one run, put in rows by one
# write --each, uploaded by one upload-worker run; then device fa pushes their records, fb (joined
# before) pulls them, fc joins after (pulling every change) and fd joins from a snapshot.
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
"$COVEN" key export --db "$F/fa/device.db" > "$F/key.txt"
"$COVEN" --quiet join "file://$F/store" --key-file "$F/key.txt" --name fb --db "$F/fb/device.db" >/dev/null
(cd "$F" && find src -type f -print0 > list0)
(cd "$F" && "$COVEN" --db fa/device.db --json stage --user --namespace tracks --files-from list0 -z > staged.jsonl)
(cd "$F" && "$COVEN" --db fa/device.db write --each staged.jsonl \
    "INSERT INTO tracks (id, title, file, _updated_at) VALUES (coven_uuid7(), :path, coven_put_user_file('tracks', :id, 'cloud'), coven_stamp())" >/dev/null)
"$COVEN" --quiet --db "$F/fa/device.db" upload-worker --once
# fmeasure NAME COMMAND...: runs it once under /usr/bin/time; keeps seconds and MiB.
declare -A fsecs frss
fmeasure() {
    local name=$1; shift
    /usr/bin/time -f '%e %M' -o "$T/time.txt" "$@"
    read -r s k < "$T/time.txt"
    fsecs[$name]=$s
    frss[$name]=$(python3 -c "import sys; print(f'{int(sys.argv[1]) / 1024:.1f}')" "$k")
}
fmeasure push "$COVEN" --quiet sync --push --db "$F/fa/device.db"
fmeasure pull "$COVEN" --quiet sync --pull --db "$F/fb/device.db"
fmeasure join "$COVEN" --quiet join "file://$F/store" --key-file "$F/key.txt" --name fc --db "$F/fc/device.db" >/dev/null
"$COVEN" --quiet snapshot --db "$F/fa/device.db" >/dev/null
fmeasure join-snapshot "$COVEN" --quiet join "file://$F/store" --key-file "$F/key.txt" --name fd --db "$F/fd/device.db" >/dev/null
for d in fb fc fd; do
    got=$(sqlite3 "$F/$d/device.db" "SELECT count(*) FROM coven_files f JOIN tracks t ON t.file = f.id")
    lost=$(sqlite3 "$F/$d/device.db" "SELECT count(*) FROM coven_lost_values")
    [[ $got == "$files" && $lost == 0 ]] || { echo "bench-sync: $d holds $got rows with their file records of $files, $lost lost values" >&2; exit 1; }
done
files_status=0
for name in push pull join join-snapshot; do
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 64 else 1)" "${frss[$name]}" || files_status=1
done
rm -rf "$F"

echo
echo "-- 6. lost --json of $lost_count lost values"
# Two devices change the same rows without seeing each other's change: the second to pull
# keeps the losing side of each as a lost value.
L=$T/lost
"$COVEN" --quiet init --storage "file://$L/store" --manifest coven.json --name la --db "$L/la/device.db" >/dev/null
"$COVEN" key export --db "$L/la/device.db" > "$L/key.txt"
"$COVEN" --quiet join "file://$L/store" --key-file "$L/key.txt" --name lb --db "$L/lb/device.db" >/dev/null
"$COVEN" --db "$L/la/device.db" write "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $lost_count - 1)
    INSERT INTO items (id, title, body, n, _updated_at)
    SELECT printf('0193a9b2-%04x-7%03x-8%03x-%012x', i >> 16, i & 4095, (i >> 12) & 4095, i), 'title ' || i, 'body ' || hex(randomblob(40)), i, coven_stamp() FROM n" >/dev/null
"$COVEN" --quiet sync --db "$L/la/device.db" && "$COVEN" --quiet sync --db "$L/lb/device.db"
"$COVEN" --db "$L/la/device.db" write "UPDATE items SET title = 'la'" >/dev/null
"$COVEN" --db "$L/lb/device.db" write "UPDATE items SET title = 'lb'" >/dev/null
"$COVEN" --quiet sync --db "$L/la/device.db" && "$COVEN" --quiet sync --db "$L/lb/device.db"
kept=$(sqlite3 "$L/lb/device.db" "SELECT count(*) FROM coven_lost_values")
[[ $kept == "$lost_count" ]] || { echo "bench-sync: lb keeps $kept lost values, not $lost_count" >&2; exit 1; }
fmeasure lost bash -c "'$COVEN' --db '$L/lb/device.db' lost --json > '$L/lost.json'"
python3 -c "import json, sys; sys.exit(0 if len(json.load(open(sys.argv[1]))) == int(sys.argv[2]) else 1)" "$L/lost.json" "$lost_count" \
    || { echo "bench-sync: lost --json did not print $lost_count values" >&2; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 64 and float(sys.argv[2]) < 1 else 1)" "${frss[lost]}" "${fsecs[lost]}" || files_status=1
rm -rf "$L"

echo
echo "== sync figures ($rows rows; on $(stat -f -c %T "$T"), synced before each run; load $load_before before, $load_after after)"
printf 'raw sqlite3 insert:   %.3f s\n' "$raw"
printf 'coven sync --push:    %.3f s  (%sx raw; target <= 2x, issue 38: <= 1.5x)   peak RSS %s MiB\n' "$push" "$(ratio "$push" "$raw")" "$(peak rss-push.txt)"
printf 'coven sync --pull:    %.3f s  (%sx raw; target <= 3x, issue 38: <= 2x)   peak RSS %s MiB (target <= 64)\n' "$pull" "$(ratio "$pull" "$raw")" "$(peak rss-pull.txt)"
printf 'published bytes:      %s vs zstd -3 of the CSV %s  (%sx; target <= 1.3x)\n' "$published" "$csvz" "$(ratio "$published" "$csvz")"
printf 'quiet sync, 10 devices: %.1f ms, CPU %.1f ms (target <= 50, issue 38: <= 15; load %s)\n' "$(milliseconds "$quiet")" "$(milliseconds "$quiet_cpu")" "$load_quiet"
printf 'moto: push %s s, pull %s s\n' "$moto_push" "$moto_pull"
echo "$files file records (rows naming files of a few bytes), peak RSS target <= 64 MiB each:"
for name in push pull join join-snapshot; do
    printf '  %-14s %7s s   peak RSS %5s MiB\n' "$name" "${fsecs[$name]}" "${frss[$name]}"
done
printf 'lost --json of %s lost values: %s s (target < 1 s), peak RSS %s MiB (target <= 64)\n' "$lost_count" "${fsecs[lost]}" "${frss[lost]}"
if [[ $files_status != 0 ]]; then
    echo "bench-sync: a target of the file records or of lost --json was missed"
    exit 1
fi
