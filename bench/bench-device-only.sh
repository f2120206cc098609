#!/usr/bin/env bash
# bench-device-only.sh: `coven make-device-only` of 200 files (1 GiB in all) from the loopback
# moto S3 server, against `rclone copy` from a crypt remote over the same server (the same job:
# download, decrypt, write), with peak RSS (target: faster than rclone, under 64 MiB). coven
# syncs every copy before it switches the files (crash safety), which rclone does not: the
# figures show rclone alone and rclone followed by sync.
#
# The files are stored the real way: staged for the cloud and sent by `coven upload-worker
# --once`. Run by bench/run.sh (COVEN, BENCH_TMP); alone: COVEN=.build/release/coven
# BENCH_TMP=$(mktemp -d) bash bench/bench-device-only.sh. FILES and FILE_SIZE change the set.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${COVEN:?set COVEN to the coven binary}" "${BENCH_TMP:?set BENCH_TMP to a scratch folder}"
FILES=${FILES:-200}
FILE_SIZE=${FILE_SIZE:-5368709}   # 200 x 5368709 bytes = 1 GiB
SHARED=${COVEN_SHARED_DIR:-$(cd .. && pwd)/shared}

if ! "$COVEN" upload-worker --help >/dev/null 2>&1; then
    echo "bench-device-only: skipped: needs 'coven upload-worker' (the upload branch) to store the files"
    exit 0
fi
for tool in rclone hyperfine python3 /usr/bin/time; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench-device-only: $tool is not installed" >&2; exit 1; }
done

work=$BENCH_TMP/device-only
rm -rf "$work"
mkdir -p "$work/src"
eval "$("$SHARED/s3/start-s3-server" 0 "$work/s3.pid")"
# rclone 1.60 cannot load AWS_CA_BUNDLE for an http endpoint; nothing here uses TLS.
unset AWS_CA_BUNDLE
trap '"$SHARED/s3/stop-s3-server" "$work/s3.pid" >/dev/null 2>&1 || true' EXIT
bucket=coven-bench

# rclone: an S3 remote on the same server and a crypt remote over it.
export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other RCLONE_CONFIG_S3_ENDPOINT=$AWS_ENDPOINT_URL \
    RCLONE_CONFIG_S3_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
    RCLONE_CONFIG_S3_REGION=$AWS_REGION RCLONE_CONFIG_S3_FORCE_PATH_STYLE=true
export RCLONE_CONFIG_SECRET_TYPE=crypt RCLONE_CONFIG_SECRET_REMOTE=s3:$bucket/rclone \
    RCLONE_CONFIG_SECRET_PASSWORD=$(rclone obscure coven-bench-password)
rclone mkdir "s3:$bucket"

echo "making $FILES files of $FILE_SIZE bytes"
for i in $(seq -w 1 "$FILES"); do head -c "$FILE_SIZE" /dev/urandom > "$work/src/track-$i.flac"; done

# coven: stage every file for the cloud in one write, then store them with the upload worker.
export COVEN_DB=$work/device.db
cat > "$work/coven.json" <<'JSON'
{"namespaces": [{"name": "music", "kind": "user", "budget": "2GiB"}],
 "tables": [{"name": "tracks", "identity": "uuid", "files": [{"column": "file"}]}],
 "migrations": ["CREATE TABLE tracks (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT"]}
JSON
"$COVEN" init --storage "s3://$bucket/coven?path_style=true" --manifest "$work/coven.json" --name bench 2>/dev/null >/dev/null
{
    for f in "$work"/src/*.flac; do
        id=$("$COVEN" stage --user "$f" --namespace music)
        echo "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file('$id'), '');"
    done
} > "$work/write.sql"
"$COVEN" write - < "$work/write.sql" >/dev/null
"$COVEN" upload-worker --once
stored=$("$COVEN" sql "SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL")
[[ $stored == "$FILES" ]] || { echo "bench-device-only: only $stored of $FILES files stored" >&2; exit 1; }
"$COVEN" sql "SELECT id FROM coven_files ORDER BY id" | awk '{ printf "%s\tAlbum\t%04d.flac\n", $1, NR }' > "$work/list.tsv"
# A copy of the device to start every run from (make-device-only switches the files).
cp "$work/device.db" "$work/base.db"
cp -r "$work/device.db.d" "$work/base.db.d"
for suffix in -wal -shm; do [[ -e $work/device.db$suffix ]] && cp "$work/device.db$suffix" "$work/base.db$suffix"; done

rclone copy "$work/src" secret: --transfers 4

reset_coven="rm -rf '$work/out' '$work/device.db' '$work/device.db-wal' '$work/device.db-shm' '$work/device.db.d' && mkdir '$work/out' && cp '$work/base.db' '$work/device.db' && cp -r '$work/base.db.d' '$work/device.db.d' && for s in -wal -shm; do [ -e '$work/base.db'\$s ] && cp '$work/base.db'\$s '$work/device.db'\$s; done; true"
reset_rclone="rm -rf '$work/out-rclone'"
hyperfine --runs 3 --export-json "$work/hyperfine.json" \
    -n coven --prepare "$reset_coven" "'$COVEN' make-device-only --folder '$work/out' < '$work/list.tsv' > /dev/null" \
    -n rclone --prepare "$reset_rclone" "rclone copy secret: '$work/out-rclone' --transfers 4" \
    -n rclone-synced --prepare "$reset_rclone && sync" "rclone copy secret: '$work/out-rclone' --transfers 4 && sync -f '$work'"

bash -c "$reset_coven"
/usr/bin/time -v "$COVEN" make-device-only --folder "$work/out" < "$work/list.tsv" > /dev/null 2> "$work/time-coven.txt"
bash -c "$reset_rclone"
/usr/bin/time -v rclone copy secret: "$work/out-rclone" --transfers 4 2> "$work/time-rclone.txt"
cmp <(cd "$work/out/Album" && sha256sum ./*.flac | cut -d' ' -f1 | sort) <(cd "$work/src" && sha256sum ./*.flac | cut -d' ' -f1 | sort) \
    || { echo "bench-device-only: the copies differ from the originals" >&2; exit 1; }

python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
runs = {r["command"]: r["mean"] for r in json.load(open(f"{work}/hyperfine.json"))["results"]}
def rss(name):
    text = open(f"{work}/time-{name}.txt").read()
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
coven, rclone, synced = runs["coven"], runs["rclone"], runs["rclone-synced"]
print(f"make-device-only 1 GiB: coven {coven:.2f} s, rclone crypt {rclone:.2f} s, rclone/coven {rclone / coven:.2f}x")
# coven syncs every copy before its switch (crash safety); rclone leaves its writes in the page cache.
print(f"with rclone's writes synced too: rclone + sync {synced:.2f} s, (rclone + sync)/coven {synced / coven:.2f}x")
print(f"peak RSS: coven {rss('coven'):.1f} MiB (target < 64), rclone {rss('rclone'):.1f} MiB")
status = 0
if coven >= rclone: print("bench-device-only: coven is not faster than rclone"); status = 1
if rss("coven") >= 64: print("bench-device-only: coven peak RSS is 64 MiB or more"); status = 1
sys.exit(status)
PY
