#!/usr/bin/env bash
# bench-device-only.sh: `coven make-device-only` of 200 files (1 GiB in all) from a loopback S3
# server, against `rclone copy` from a crypt remote over the same server (the same job:
# download, decrypt, write), with peak RSS (target: faster than rclone, under 64 MiB). One row
# per server: moto (Python, at most about one core under its GIL) and SeaweedFS (Go), which
# separates the server's cost from the client's.
#
# On two cores the job is CPU-bound, so beside the wall times it prints the CPU seconds of the
# client (user + sys) and of the server process during each run (medians of RUNS runs). coven
# does more per byte than rclone by design: a whole-file SHA-256 checked before a copy takes its
# name, a SHA-256 of every 64 KiB chunk (recorded for later moves), and an fsync of every copy
# before the switch; rclone crypt hashes nothing and syncs nothing (the rclone + sync row).
#
# The files are stored the real way: staged for the cloud and sent by `coven upload-worker
# --once`. Run by bench/run.sh (COVEN, BENCH_TMP); alone: COVEN=.build/release/coven
# BENCH_TMP=$(mktemp -d) bash bench/bench-device-only.sh. FILES and FILE_SIZE change the set,
# SERVERS the rows ("moto seaweedfs"), RUNS the runs per figure (3).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${COVEN:?set COVEN to the coven binary}" "${BENCH_TMP:?set BENCH_TMP to a scratch folder}"
FILES=${FILES:-200}
FILE_SIZE=${FILE_SIZE:-5368709}   # 200 x 5368709 bytes = 1 GiB
SERVERS=${SERVERS:-moto seaweedfs}
RUNS=${RUNS:-3}
SHARED=${COVEN_SHARED_DIR:-$(cd .. && pwd)/shared}

if ! "$COVEN" upload-worker --help >/dev/null 2>&1; then
    echo "bench-device-only: skipped: needs 'coven upload-worker' (the upload branch) to store the files"
    exit 0
fi
for tool in rclone hyperfine python3 /usr/bin/time; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench-device-only: $tool is not installed" >&2; exit 1; }
done

root=$BENCH_TMP/device-only
rm -rf "$root"
mkdir -p "$root/src"
echo "making $FILES files of $FILE_SIZE bytes"
for i in $(seq -w 1 "$FILES"); do head -c "$FILE_SIZE" /dev/urandom > "$root/src/track-$i.flac"; done

pids=()
trap 'for pid in "${pids[@]}"; do "$SHARED/s3/stop-s3-server" "$pid" >/dev/null 2>&1 || true; done' EXIT

# Starts a server with no descriptor but the standard three, so it never holds what the caller
# holds (such as the machine's bench lock, /tmp/coven-bench.lock) after this script ends.
start_server() {
    local script=$1 pidfile=$2
    (
        for fd in $(ls /proc/$BASHPID/fd); do [[ $fd -gt 2 ]] && eval "exec $fd>&-" 2>/dev/null; done
        exec "$SHARED/s3/$script" 0 "$pidfile"
    )
}

# One server's row: store the files, time both tools, print the figures.
bench_server() {
    local server=$1 script
    case $server in
        moto) script=start-s3-server ;;
        seaweedfs) script=start-seaweedfs-server ;;
        *) echo "bench-device-only: unknown server '$server'" >&2; return 1 ;;
    esac
    local work=$root/$server
    mkdir -p "$work"
    pids+=("$work/s3.pid")
    eval "$(start_server "$script" "$work/s3.pid")"
    local server_pid
    server_pid=$(cat "$work/s3.pid")
    # rclone 1.60 cannot load AWS_CA_BUNDLE for an http endpoint; nothing here uses TLS.
    unset AWS_CA_BUNDLE
    local bucket=coven-bench

    # rclone: an S3 remote on the same server and a crypt remote over it.
    export RCLONE_CONFIG_S3_TYPE=s3 RCLONE_CONFIG_S3_PROVIDER=Other RCLONE_CONFIG_S3_ENDPOINT=$AWS_ENDPOINT_URL \
        RCLONE_CONFIG_S3_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
        RCLONE_CONFIG_S3_REGION=$AWS_REGION RCLONE_CONFIG_S3_FORCE_PATH_STYLE=true
    export RCLONE_CONFIG_SECRET_TYPE=crypt RCLONE_CONFIG_SECRET_REMOTE=s3:$bucket/rclone \
        RCLONE_CONFIG_SECRET_PASSWORD=$(rclone obscure coven-bench-password)
    rclone mkdir "s3:$bucket" 2>/dev/null

    # coven: stage every file for the cloud in one write, then store them with the upload worker.
    export COVEN_DB=$work/device.db
    cat > "$work/coven.json" <<'JSON'
{"namespaces": [{"name": "music", "kind": "user", "budget": "2GiB"}],
 "tables": [{"name": "tracks", "identity": "uuid", "files": [{"column": "file"}]}],
 "migrations": ["CREATE TABLE tracks (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT"]}
JSON
    "$COVEN" init --storage "s3://$bucket/coven?path_style=true" --manifest "$work/coven.json" --name bench 2>/dev/null >/dev/null
    {
        for f in "$root"/src/*.flac; do
            id=$("$COVEN" stage --user "$f" --namespace music)
            echo "INSERT INTO tracks (id, file, _updated_at) VALUES (coven_uuid7(), coven_put_user_file('$id'), '');"
        done
    } > "$work/write.sql"
    "$COVEN" write - < "$work/write.sql" >/dev/null
    "$COVEN" upload-worker --once
    local stored
    stored=$("$COVEN" sql "SELECT count(*) FROM coven_files WHERE coven_file_device(coordinates) IS NULL")
    [[ $stored == "$FILES" ]] || { echo "bench-device-only: only $stored of $FILES files stored on $server" >&2; return 1; }
    "$COVEN" sql "SELECT id FROM coven_files ORDER BY id" | awk '{ printf "%s\tAlbum\t%04d.flac\n", $1, NR }' > "$work/list.tsv"
    # A copy of the device to start every run from (make-device-only switches the files).
    cp "$work/device.db" "$work/base.db"
    cp -r "$work/device.db.d" "$work/base.db.d"
    for suffix in -wal -shm; do [[ -e $work/device.db$suffix ]] && cp "$work/device.db$suffix" "$work/base.db$suffix"; done
    rclone copy "$root/src" secret: --transfers 4 2>/dev/null

    local reset_coven="rm -rf '$work/out' '$work/device.db' '$work/device.db-wal' '$work/device.db-shm' '$work/device.db.d' && mkdir '$work/out' && cp '$work/base.db' '$work/device.db' && cp -r '$work/base.db.d' '$work/device.db.d' && for s in -wal -shm; do [ -e '$work/base.db'\$s ] && cp '$work/base.db'\$s '$work/device.db'\$s; done; true"
    local reset_rclone="rm -rf '$work/out-rclone'"
    local run_coven="'$COVEN' make-device-only --folder '$work/out' < '$work/list.tsv' > /dev/null"
    local run_rclone="rclone copy secret: '$work/out-rclone' --transfers 4"
    hyperfine --runs "$RUNS" --export-json "$work/hyperfine.json" \
        -n coven --prepare "$reset_coven" "$run_coven" \
        -n rclone --prepare "$reset_rclone" "$run_rclone" \
        -n rclone-synced --prepare "$reset_rclone && sync" "$run_rclone && sync -f '$work'"

    # CPU seconds of each tool and of the server around each run, and peak RSS.
    : > "$work/cpu.txt"
    local tick
    tick=$(getconf CLK_TCK)
    for run in $(seq 1 "$RUNS"); do
        for tool in coven rclone; do
            if [[ $tool == coven ]]; then bash -c "$reset_coven"; else bash -c "$reset_rclone"; fi
            sync
            local before after
            before=$(awk '{ print $14 + $15 }' "/proc/$server_pid/stat")
            if [[ $tool == coven ]]; then
                /usr/bin/time -v -o "$work/time.txt" bash -c "exec $run_coven"
            else
                /usr/bin/time -v -o "$work/time.txt" bash -c "exec $run_rclone 2>/dev/null"
            fi
            after=$(awk '{ print $14 + $15 }' "/proc/$server_pid/stat")
            awk -v tool="$tool" -v server="$(( after - before ))" -v tick="$tick" '
                /User time/ { user = $NF } /System time/ { sys = $NF } /Maximum resident/ { rss = $NF }
                END { printf "%s %s %s %.2f %d\n", tool, user, sys, server / tick, rss }' "$work/time.txt" >> "$work/cpu.txt"
        done
    done
    cmp <(cd "$work/out/Album" && sha256sum ./*.flac | cut -d' ' -f1 | sort) <(cd "$root/src" && sha256sum ./*.flac | cut -d' ' -f1 | sort) \
        || { echo "bench-device-only: the copies differ from the originals" >&2; return 1; }
    "$SHARED/s3/stop-s3-server" "$work/s3.pid" >/dev/null 2>&1 || true

    python3 - "$work" "$server" "$(( FILES * FILE_SIZE ))" <<'PY'
import json, statistics, sys
work, server, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {r["command"]: statistics.median(r["times"]) for r in json.load(open(f"{work}/hyperfine.json"))["results"]}
files = sum(1 for _ in open(f"{work}/list.tsv"))
cpu = {}
for line in open(f"{work}/cpu.txt"):
    tool, user, sys_, srv, rss = line.split()
    cpu.setdefault(tool, []).append((float(user), float(sys_), float(srv), int(rss) / 1024))
med = {tool: [statistics.median(column) for column in zip(*rows)] for tool, rows in cpu.items()}
coven, rclone, synced = runs["coven"], runs["rclone"], runs["rclone-synced"]
size = f"{total / 2**30:.2f} GiB" if total >= 1000 * 2**20 else f"{total / 2**20:.1f} MiB"
print(f"{server}: make-device-only {files} files, {size}: coven {coven:.2f} s, rclone crypt {rclone:.2f} s, rclone/coven {rclone / coven:.2f}x;"
      f" rclone + sync {synced:.2f} s, (rclone + sync)/coven {synced / coven:.2f}x")
for tool in ("coven", "rclone"):
    user, sys_, srv, rss = med[tool]
    print(f"{server}:   {tool:6} cpu {user + sys_:.2f} s (user {user:.2f}, sys {sys_:.2f}), server cpu {srv:.2f} s,"
          f" client + server {user + sys_ + srv:.2f} s on 2 cores, peak RSS {rss:.1f} MiB")
status = 0
if coven >= rclone: print(f"bench-device-only: {server}: coven is not faster than rclone"); status = 1
if med["coven"][3] >= 64: print(f"bench-device-only: {server}: coven peak RSS is 64 MiB or more"); status = 1
sys.exit(status)
PY
}

status=0
for server in $SERVERS; do
    bench_server "$server" || status=1
done
exit $status
