# bench/lib.sh: the start every benchmark of a device and its store shares, sourced (not run:
# bench/run.sh runs only bench/bench-*.sh) by bench-sync.sh, bench-gc.sh and bench-snapshot.sh
# after their `set -euo pipefail`:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_start NAME
#
# bench_start NAME   checks COVEN and BENCH_TMP (from bench/run.sh); sets ROOT (the folder it was
#                    started in, the repository under bench/run.sh) and T ($BENCH_TMP/NAME, made
#                    empty), and goes into T; every pid added to the array `pids` is killed on exit.
# items_manifest     writes coven.json: one app namespace and one uuid table, `items`, whose
#                    CREATE TABLE statement it leaves in `table`.
# median I FILE      the median (s) of the I-th command of a hyperfine --export-json FILE.
# ratio A B          A / B, to 2 decimals.
# peak FILE          the peak RSS in MiB, to 1 decimal, of a /usr/bin/time -v report.
# now                the time in seconds (for elapsed).
# elapsed A B [D]    B - A in seconds, to D decimals (3 unless given).
# milliseconds S     S seconds in milliseconds.
# item_rows N        writes rows.csv, raw.sql (sqlite3 inserting N rows of about 200 bytes in one
#                    transaction) and coven.sql (coven inserting the same rows), seeded: the rows of
#                    bench-sync and bench-members.
# start_moto BUCKET  starts moto (the signature-checking S3 server, shared/s3/start-s3-server
#                    from COVEN_SHARED_DIR, default ../shared beside ROOT) on a free port with its
#                    AWS_* settings exported and its pid in `pids`, and creates BUCKET; returns 1
#                    when the server does not start (its messages in $T/s3.log).

bench_start() {
    : "${COVEN:?run through bench/run.sh}" "${BENCH_TMP:?run through bench/run.sh}"
    ROOT=$(pwd)
    T=$BENCH_TMP/$1
    rm -rf "$T" && mkdir -p "$T"
    cd "$T"
    pids=()
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
}

items_manifest() {
    table="CREATE TABLE items (id TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT, n INTEGER, _updated_at TEXT NOT NULL) STRICT"
    cat > coven.json <<EOF
{
  "namespaces": [ { "name": "files", "kind": "app" } ],
  "tables": [ { "name": "items", "identity": "uuid" } ],
  "migrations": [ "$table" ]
}
EOF
}

item_rows() {
    python3 - "$1" <<'PY'
import sys, random
n = int(sys.argv[1]); random.seed(7)
words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
with open("rows.csv", "w") as csv, open("raw.sql", "w") as raw, open("coven.sql", "w") as cov:
    raw.write("BEGIN;\n")
    for i in range(n):
        rid = "0193a9b2-%04x-7%03x-8%03x-%012x" % (i >> 16, i & 0xfff, (i >> 12) & 0xfff, i)
        title = " ".join(random.choice(words) for _ in range(4))
        body = " ".join(random.choice(words) for _ in range(22))[:150]
        stamp = "2026-12-01T00:00:00.000Z-0000-00000000-0000-4000-8000-000000000000"
        csv.write(f'{rid},"{title}","{body}",{i},{stamp}\n')
        raw.write(f"INSERT INTO items VALUES ('{rid}', '{title}', '{body}', {i}, '{stamp}');\n")
        cov.write(f"INSERT INTO items (id, title, body, n, _updated_at) VALUES ('{rid}', '{title}', '{body}', {i}, coven_stamp());\n")
    raw.write("COMMIT;\n")
PY
}

# tiny_files DIR COUNT: COUNT files of 4 bytes each (their index), 1,000 to a folder: a library
# of many files whose bytes cost nothing to write.
tiny_files() {
    python3 - "$1" "$2" <<'PY'
import os, sys
folder, count = sys.argv[1], int(sys.argv[2])
for index in range(count):
    sub = os.path.join(folder, f"{index // 1000:03d}")
    if index % 1000 == 0: os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"{index:06d}"), "wb") as out:
        out.write(index.to_bytes(4, "little"))
PY
}

median() { jq -r ".results[$1].median" "$2"; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }
peak() { awk -F': ' '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$1"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.{sys.argv[3]}f}')" "$1" "$2" "${3:-3}"; }
milliseconds() { python3 -c "import sys; print(float(sys.argv[1]) * 1000)" "$1"; }

start_moto() {
    local bucket=$1 exports
    SHARED=${COVEN_SHARED_DIR:-$(dirname "$ROOT")/shared}
    exports=$("$SHARED/s3/start-s3-server" 0 "$T/s3.pid" 2>"$T/s3.log") || return 1
    eval "$exports"
    pids+=("$S3_SERVER_PID")
    # Called as a condition (errexit is off here): a bucket that cannot be made ends the run.
    python3 -c "import boto3, os, sys; boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL']).create_bucket(Bucket=sys.argv[1])" "$bucket" \
        || { echo "bench: cannot create the bucket $bucket on moto" >&2; exit 1; }
}

# rclone_moto_config PATH: an rclone config with remote `moto` (s3 on the moto server of the AWS_*
# settings start_moto exported) and `motocrypt` (a crypt remote over moto:PATH). rclone's AWS SDK
# cannot take the machine's AWS_CA_BUNDLE: run rclone under `env -u AWS_CA_BUNDLE` (loopback
# needs none).
rclone_moto_config() {
    cat <<CONF
[moto]
type = s3
provider = Other
access_key_id = $AWS_ACCESS_KEY_ID
secret_access_key = $AWS_SECRET_ACCESS_KEY
endpoint = $AWS_ENDPOINT_URL
region = ${AWS_REGION:-us-east-1}

[motocrypt]
type = crypt
remote = moto:$1
password = $(rclone obscure coven-bench-password)
password2 = $(rclone obscure coven-bench-salt)
CONF
}
