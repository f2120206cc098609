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
#
# hyperfine medians of BENCH_SYNC_RUNS runs (default 5), each run from the same starting state
# (the device databases and the store copied back by --prepare). Environment: COVEN and
# BENCH_TMP from bench/run.sh; BENCH_SYNC_ROWS changes the row count.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rows=${BENCH_SYNC_ROWS:-100000}
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
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json sync.json \
    --command-name "sqlite3 raw insert" --prepare "rm -f $T/raw.db && sqlite3 $T/raw.db \"$table\"" "sqlite3 $T/raw.db < $T/raw.sql" \
    --command-name "coven sync --push" --prepare "restore a; restore store" "$COVEN sync --push --db $T/a/device.db > /dev/null" \
    --command-name "coven sync --pull" --prepare "restore b; rm -rf $T/store && cp -a $T/store.pushed $T/store" "$COVEN sync --pull --db $T/b/device.db > /dev/null"
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
hyperfine --style basic --runs 20 --warmup 2 --export-json quiet.json "$COVEN sync --db $T/b/device.db"
quiet=$(median 0 quiet.json)

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
echo "== sync figures ($rows rows)"
printf 'raw sqlite3 insert:   %.3f s\n' "$raw"
printf 'coven sync --push:    %.3f s  (%sx raw; target <= 2x)   peak RSS %s MiB\n' "$push" "$(ratio "$push" "$raw")" "$(peak rss-push.txt)"
printf 'coven sync --pull:    %.3f s  (%sx raw; target <= 3x)   peak RSS %s MiB (target <= 64)\n' "$pull" "$(ratio "$pull" "$raw")" "$(peak rss-pull.txt)"
printf 'published bytes:      %s vs zstd -3 of the CSV %s  (%sx; target <= 1.3x)\n' "$published" "$csvz" "$(ratio "$published" "$csvz")"
printf 'quiet sync, 10 devices: %.1f ms (target <= 50)\n' "$(milliseconds "$quiet")"
printf 'moto: push %s s, pull %s s\n' "$moto_push" "$moto_pull"
