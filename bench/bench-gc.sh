#!/usr/bin/env bash
# gc (issue 13), in one run:
#
#   1. a quiet `coven gc` on a device with 100,000 stored files and nothing to delete, on
#      file://: target <= 100 ms; its storage requests counted through the fault proxy on
#      moto (no listing of files/: one listing of devices/ and one of snapshots/, one GET per
#      other device).
#   2. deleting 10,000 unreferenced objects on moto (the signature-checking S3 server): `coven gc`
#      (DeleteObjects, 1,000 keys a request, 4 requests at once) beside `rclone delete` of the
#      same objects.
#
# The 100,000 records are written into the device database with sqlite3 (a quiet gc reads
# none of them; making them by uploading would only measure uploads). Environment: COVEN and
# BENCH_TMP from bench/run.sh; BENCH_GC_FILES and BENCH_GC_DELETES change the counts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

files=${BENCH_GC_FILES:-100000}
deletes=${BENCH_GC_DELETES:-10000}
bench_start gc

cat > coven.json <<'JSON'
{
  "namespaces": [ { "name": "covers", "kind": "app" } ],
  "tables": [ { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
}
JSON

# N stored records, each named by a row, written straight into a device database.
fill() {
    local db=$1 n=$2 device
    device=$(sqlite3 "$db" "SELECT value FROM coven_meta WHERE key = 'device_id'")
    python3 - "$db" "$n" "$device" <<'PY'
import sqlite3, sys, uuid
db, n, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = sqlite3.connect(db)
stamp = "2026-12-01T00:00:00.000Z-0000-" + device
with con:
    for i in range(n):
        fid = str(uuid.UUID(int=i, version=4))
        coords = '{"at":"stored","key":"%064x","object":"files/%s/bench%07d"}' % (i, device, i)
        con.execute("INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at) VALUES (?, 'store', 'covers', 1, NULL, ?, ?)", (fid, coords, stamp))
        con.execute("INSERT INTO settings (id, value, file, _updated_at) VALUES (?, 'v', ?, ?)", ("s%d" % i, fid, stamp))
PY
}

echo "-- 1. a quiet gc with $files stored files (file://)"
"$COVEN" --quiet init --storage "file://$T/store" --manifest coven.json --name a --db "$T/a/device.db" >/dev/null
"$COVEN" key export --db "$T/a/device.db" > key.txt
"$COVEN" --quiet join "file://$T/store" --key-file key.txt --name b --db "$T/b/device.db" >/dev/null
fill "$T/a/device.db" "$files"
"$COVEN" gc --db "$T/a/device.db" >/dev/null
"$COVEN" sync --db "$T/b/device.db" >/dev/null
hyperfine --style basic --runs 20 --warmup 2 --export-json quiet.json "$COVEN gc --db $T/a/device.db"
quiet=$(median 0 quiet.json)
# What a quiet pass opens in storage (strace of the directory reads).
strace -f -e trace=getdents64 -o strace.txt "$COVEN" gc --db "$T/a/device.db" >/dev/null
listed=$(grep -c getdents64 strace.txt || true)

requests=skipped; coven_delete=skipped; rclone_delete=skipped
if start_moto coven-gc; then
    python3 "$ROOT/scripts/faultproxy.py" --upstream "$AWS_ENDPOINT_URL" --port 0 --port-file "$T/proxy.port" \
        --control "$T/proxy.json" --stats "$T/proxy.stats" --log "$T/proxy.log" 2>"$T/proxy.err" &
    pids+=("$!")
    for _ in $(seq 100); do [[ -s $T/proxy.port ]] && break; sleep 0.1; done
    proxy="http://127.0.0.1:$(cat "$T/proxy.port")"
    url="s3://coven-gc/store?endpoint=$proxy&path_style=true"
    "$COVEN" --quiet init --storage "$url" --manifest coven.json --name ma --db "$T/ma/device.db" >/dev/null
    "$COVEN" key export --db "$T/ma/device.db" > mkey.txt
    "$COVEN" --quiet join "$url" --key-file mkey.txt --name mb --db "$T/mb/device.db" >/dev/null
    fill "$T/ma/device.db" "$files"
    "$COVEN" gc --db "$T/ma/device.db" >/dev/null
    "$COVEN" sync --db "$T/mb/device.db" >/dev/null
    : > "$T/proxy.log"
    "$COVEN" gc --db "$T/ma/device.db" >/dev/null
    requests=$(wc -l < "$T/proxy.log")
    echo "requests of a quiet gc on moto:"; sed 's/^/  /' "$T/proxy.log"
    if grep -q 'prefix=store%2Ffiles' "$T/proxy.log"; then echo "bench-gc: a quiet gc listed files/" >&2; exit 1; fi

    echo
    echo "-- 2. deleting $deletes objects on moto"
    device=$(sqlite3 "$T/ma/device.db" "SELECT value FROM coven_meta WHERE key = 'device_id'")
    put_objects() {
        python3 - "$deletes" "$device" <<'PY'
import boto3, os, sys
from concurrent.futures import ThreadPoolExecutor
n, device = int(sys.argv[1]), sys.argv[2]
s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])
def put(i): s3.put_object(Bucket='coven-gc', Key='store/files/%s/gone%06d' % (device, i), Body=b'x' * 64)
with ThreadPoolExecutor(16) as pool: list(pool.map(put, range(n)))
PY
    }
    put_objects
    # The objects as this device's candidates: deleted records whose write was published.
    python3 - "$T/ma/device.db" "$deletes" "$device" <<'PY'
import sqlite3, sys
db, n, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = sqlite3.connect(db)
with con:
    for i in range(n):
        con.execute("INSERT INTO coven_gc_candidates (object, device, stamp, seq, why, files, made_at) VALUES (?, ?, '', 0, 'deleted', '[]', '2026-12-01T00:00:00Z')",
                    ("files/%s/gone%06d" % (device, i), device))
PY
    "$COVEN" sync --db "$T/mb/device.db" >/dev/null
    start=$(now)
    "$COVEN" gc --db "$T/ma/device.db" --json > delete.json
    end=$(now)
    coven_delete=$(elapsed "$start" "$end" 2)
    gone=$(jq '[.deleted[] | select(.kind == "file")] | length' delete.json)
    [[ $gone == "$deletes" ]] || { echo "bench-gc: coven gc deleted $gone of $deletes" >&2; exit 1; }
    put_objects
    rclone config create s3moto s3 provider=Other endpoint="$AWS_ENDPOINT_URL" access_key_id="$AWS_ACCESS_KEY_ID" \
        secret_access_key="$AWS_SECRET_ACCESS_KEY" region=us-east-1 force_path_style=true --config "$T/rclone.conf" >/dev/null
    start=$(now)
    env -u AWS_CA_BUNDLE rclone --config "$T/rclone.conf" delete "s3moto:coven-gc/store/files/$device/"
    end=$(now)
    rclone_delete=$(elapsed "$start" "$end" 2)
else
    echo "bench-gc: no moto server (see $T/s3.log): parts on moto skipped" >&2
fi

echo
echo "== bench-gc summary"
printf 'quiet gc, %s stored files, file://: %.1f ms median (target <= 100 ms); directory reads in storage: %s\n' "$files" "$(milliseconds "$quiet")" "$listed"
echo "quiet gc on moto: $requests storage requests (no listing of files/)"
echo "deleting $deletes objects on moto: coven gc ${coven_delete} s (DeleteObjects, 4 at once); rclone delete ${rclone_delete} s"
