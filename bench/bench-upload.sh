#!/usr/bin/env bash
# Upload of a staged 1 GiB file: coven upload-worker beside rclone with a crypt remote and cp.
#
#   file://   coven upload-worker --once --jobs 1   vs  rclone copy to a local crypt remote  vs  cp
#   s3://     coven upload-worker --once to the loopback moto server  vs  rclone copy to a crypt
#             remote over the same server
#   memory    peak RSS (/usr/bin/time -v) with --jobs 1 (1 GiB file) and --jobs 4 (four 256 MiB files)
#
# Targets (issue 4): file:// at least 5x faster than rclone crypt; s3:// faster than rclone crypt;
# peak RSS under 64 MiB with --jobs 1 and under 128 MiB with --jobs 4. hyperfine, median of 5.
# Each run starts from a copy of a device whose upload is queued (the original is staged once).
# SIZE (bytes, default 1 GiB) and RUNS (default 5) may be set for a quick look; SKIP_S3=1 skips S3.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${COVEN:?set by bench/run.sh}" "${BENCH_TMP:?set by bench/run.sh}"
SIZE=${SIZE:-1073741824}
RUNS=${RUNS:-5}
SHARED=${COVEN_SHARED_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/shared}
cd "$BENCH_TMP"

median() { jq -r '.results[] | "\(.command)\t\(.median)"' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
rss() { # peak RSS in KiB of a command
    /usr/bin/time -v "$@" 2> time.out >/dev/null || { cat time.out >&2; return 1; }
    awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' time.out
}

echo "making a $SIZE-byte file of random bytes"
head -c "$SIZE" /dev/urandom > big.bin
cat > coven.json <<'EOF'
{ "namespaces": [ { "name": "originals", "kind": "user", "budget": "1GiB" } ],
  "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
EOF

# A template device with FILES queued, for storage URL $1, in folder $2.
template() {
    local storage=$1 folder=$2; shift 2
    rm -rf "$folder" && mkdir -p "$folder"
    COVEN_DB=$folder/device.db "$COVEN" init --storage "$storage" --manifest coven.json >/dev/null 2>&1
    for original in "$@"; do
        local staged
        staged=$(COVEN_DB=$folder/device.db "$COVEN" stage --user "$original" --namespace originals)
        COVEN_DB=$folder/device.db "$COVEN" write "INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('$staged'), '')" >/dev/null
    done
}

# ---------------------------------------------------------------- file://
rclone_config=$BENCH_TMP/rclone.conf
password=$(rclone obscure coven-bench-password)
salt=$(rclone obscure coven-bench-salt)
cat > "$rclone_config" <<EOF
[localcrypt]
type = crypt
remote = $BENCH_TMP/rclone-dest
password = $password
password2 = $salt
EOF

template "file://$BENCH_TMP/store" template-file "$BENCH_TMP/big.bin"
prepare_file="rm -rf $BENCH_TMP/run && cp -a $BENCH_TMP/template-file $BENCH_TMP/run && rm -rf $BENCH_TMP/store/files $BENCH_TMP/store/.uploads && sync"

hyperfine --runs "$RUNS" --export-json file.json \
    --prepare "$prepare_file" -n "coven upload-worker (file://)" "COVEN_DB=$BENCH_TMP/run/device.db $COVEN upload-worker --once --jobs 1" \
    --prepare "rm -rf $BENCH_TMP/rclone-dest && sync" -n "rclone copy (local crypt)" "rclone --config $rclone_config copy $BENCH_TMP/big.bin localcrypt:" \
    --prepare "rm -rf $BENCH_TMP/cp-dest && mkdir $BENCH_TMP/cp-dest && sync" -n "cp" "cp $BENCH_TMP/big.bin $BENCH_TMP/cp-dest/"
median file.json
coven_file=$(jq -r '.results[0].median' file.json)
rclone_file=$(jq -r '.results[1].median' file.json)
cp_file=$(jq -r '.results[2].median' file.json)
echo "file://: coven $(ratio "$SIZE" "$(awk -v t="$coven_file" 'BEGIN{print t*1e6}')") MB/s; rclone crypt / coven = $(ratio "$rclone_file" "$coven_file")x (target >= 5); coven / cp = $(ratio "$coven_file" "$cp_file")x"

# ---------------------------------------------------------------- file:// on tmpfs
# The same upload with the store and rclone's destination in memory (/dev/shm): the engine's
# speed (read, hash check, AES-GCM, write) without the disk's syncs, which coven's file://
# provider does per part (an fdatasync of the part's bytes, then of its 64-byte record) and
# rclone's local backend does not do at all. Target (issue 23): at least 5x rclone crypt.
#
# Where its time goes (perf record, 2 cores, 1 GiB, --jobs 1), as shipped ("before"), and with the
# chunk checks four chunks at a time by a SHA-256 of coven's own in C on the SHA extensions
# ("after", branch h17-bigupload, not merged then: libgcrypt already hashes with SHA-NI and the 5x
# target held without it; issue 38's 6x did not, and the sixteenth session below took the loop,
# two chunks at a time, as SHA256.hashPair):
#                                      before     after
#   SHA-256 of the 64 KiB chunks       0.58 s     0.41 s   one chunk's rounds wait on each other
#   AES-GCM (libgcrypt)                0.22 s     0.24 s
#   pwrite into tmpfs (kernel)         0.59 s     0.55 s   mostly allocating and charging 4 KiB pages
#   pread of the original (kernel)     0.20 s     0.16 s   one copy; 16,384 calls cost little
#   the rest (SQLite, threads, exec)   0.18 s     0.10 s
#   CPU in all (one profiled run each) 1.78 s     1.46 s   wall 0.86 s -> 0.75 s, 1.7-1.8 cores busy
# Not much more to take: the kernel's part (about 0.7 CPU-s: dd of the file into tmpfs alone is
# 0.45-0.6 s) stays on tmpfs mounted without huge pages, and the original cannot be mapped instead
# of read (a check then a seal of shared pages could send bytes that were not checked, and a
# truncated original would kill the worker with SIGBUS). Floor on two idle cores: about 0.6 s.
#
# Measured on this project's machine (2 vCPUs, AMD EPYC with SHA-NI and VAES, tmpfs, RUNS=5,
# medians), the lead's work sharing the cores (load 1.5-3.5):
#                                       coven          rclone crypt   ratio    cp
#   this script, tmpfs section, before    0.95 s         5.49 s         5.77x    0.48 s
#   this script, tmpfs section, after     0.81 s         4.81 s         5.97x    0.48 s
#   9 rounds interleaved, before          0.78 s         4.50 s         5.77x
#   9 rounds interleaved, after           0.72 s         4.50 s         6.25x    (load 1.5-1.8)
#   user / system CPU-s, before / after   0.78/0.63, 0.59/0.64  4.03/0.84
#   peak RSS --jobs 1 / --jobs 4          57 / 89 MiB before and after; rclone 77 MiB
# With BENCH_TMP on the disk (as make bench runs it), load 2.0-3.1: the disk section 0.98 s before
# (5.10x), 0.86 s after (6.68x); the tmpfs section 1.04 s (4.82x) and 1.16 s (4.37x): with the
# cores shared, five runs of 1 s move by 0.2 s from one run of the script to the next, so compare
# before and after interleaved, in one loop, rather than from two runs of this script.
# The system time is the figure that wanders: the same run takes 0.6-1.9 s of it (cp 0.43-3.0 s)
# when the cores are shared or memory is short (the 1.27 s with 1.44 s of system time issue 23
# quotes is in that range).
# Session of 2026-12-04 (h38: the multipart pipeline moved into PartPipeline, no change of
# behaviour), RUNS=3 SKIP_S3=1, load 3.0-4.0 (two other sessions building): disk 1.11 s, rclone
# crypt 4.83 s (4.36x), cp 0.25 s; tmpfs 1.10 s, rclone crypt 4.76 s (4.35x; issue 38 asks >= 6x),
# cp 0.38 s; peak RSS 58 / 90 MiB. Interleaved on tmpfs, main's binary and this one in turn, four
# rounds, load 2.4-2.7: 1.26, 0.99, 1.08, 0.73 s against 0.74, 0.81, 0.76, 0.71 s (user 0.8 s,
# system 0.5-0.6 s each): no change; the lead's quiet 0.72 s against rclone's 4.29 s (5.96x) is
# the figure to compare, with the cores free.
# The machine's memory is a VM's whose freed pages go back to the host, so fresh pages can cost a
# fault on the host too (a dd of 1 GiB into tmpfs: 0.45 s or 2.4 s).
# Session of 2026-12-05 (fourteenth), load 1.0-1.4: this script (SKIP_S3=1) gave tmpfs 1.12 s
# against rclone crypt 4.92 s (4.40x), the stop-45 binary 1.04 s (4.75x), both with a first run
# of 2.7-2.9 s. One staged 1 GiB copied afresh each run, five rounds in turn: this stop's
# binary 0.90-1.00 s (one 1.28 s) against rclone crypt 4.82-4.89 s (two of 5.44 and 6.14 s),
# 5.3x with the medians (0.92 and 4.89 s); this stop's 0.91-0.97 s (one 1.51 s) against the
# binary of 2026-12-03 that measured 0.81 s and 6.89x, 0.91 and 0.95 s (three of 1.09-2.57 s):
# the code is no slower; the system time of a run is 0.76-0.83 s (0.6 s then).
# perf of a run: libgcrypt 48% of the CPU (most of it the SHA-256 check of the 64 KiB chunks
# on the SHA extensions, then AES-GCM), the kernel 49% (the copies into and out of tmpfs 22%,
# its page and inode locks 10%), coven's own code 1%.
# Session of 2026-12-05 (sixteenth), load 1.1-1.2: the chunk checks hash two chunks at a time
# (SHA256.hashPair, 3.4 GB/s a core against libgcrypt's 1.8: user CPU 0.9 -> 0.55 s), and
# file:// writes one part at a time into an upload's file under a lock of the process, where a
# second sender spun on the inode's lock in the kernel (7% of the CPU once the hashing shrank).
# Seven runs each in turn, tmpfs: the last stop's binary 1.08 s, the pairs 0.82 s, with the lock
# 0.75 s, rclone crypt 4.95-4.98 s. This script (SKIP_S3=1): disk 0.80 s against rclone crypt
# 5.07 s (6.31x, 4.70x last stop); tmpfs 0.774 s against 4.869 s: 6.29x (issue 38's bar 6x);
# peak RSS 58 / 91 MiB. perf of a run now: the pairs' SHA-256 24%, the copy into tmpfs pages 20%,
# the copy out of the page cache 9%, AES-GCM most of the rest of libgcrypt's.
if [[ -d /dev/shm && $(df --output=avail -B1 /dev/shm | tail -1) -gt $((3 * SIZE)) ]]; then
    # Not the last section's three copies of the file (they are in memory too when BENCH_TMP is
    # on tmpfs, as its store, rclone's and cp's destinations): the machine short of free memory
    # makes every tool's writes here slower, and the first one measured the most.
    rm -rf "$BENCH_TMP/store/files" "$BENCH_TMP/store/.uploads" "$BENCH_TMP/rclone-dest" "$BENCH_TMP/cp-dest"
    SHM=$(mktemp -d /dev/shm/coven-bench.XXXXXX)
    trap 'rm -rf "$SHM"' EXIT
    sed "s|$BENCH_TMP/rclone-dest|$SHM/rclone-dest|" "$rclone_config" > "$SHM/rclone.conf"
    template "file://$SHM/store" "$SHM/template" "$BENCH_TMP/big.bin"
    # The source is read into the page cache before each run of each tool: this machine's
    # reclaim (DAMON's pageout) evicts a file's cold pages within a minute, and a run that
    # reads some from the disk was timed as the tool's.
    warm="cat $BENCH_TMP/big.bin > /dev/null"
    hyperfine --runs "$RUNS" --export-json shm.json \
        --prepare "rm -rf $SHM/run && cp -a $SHM/template $SHM/run && rm -rf $SHM/store/files $SHM/store/.uploads && $warm" -n "coven upload-worker (file:// on tmpfs)" "COVEN_DB=$SHM/run/device.db $COVEN upload-worker --once --jobs 1" \
        --prepare "rm -rf $SHM/rclone-dest && $warm" -n "rclone copy (local crypt on tmpfs)" "rclone --config $SHM/rclone.conf copy $BENCH_TMP/big.bin localcrypt:" \
        --prepare "rm -rf $SHM/cp-dest && mkdir $SHM/cp-dest && $warm" -n "cp (to tmpfs)" "cp $BENCH_TMP/big.bin $SHM/cp-dest/"
    median shm.json
    coven_shm=$(jq -r '.results[0].median' shm.json)
    rclone_shm=$(jq -r '.results[1].median' shm.json)
    cp_shm=$(jq -r '.results[2].median' shm.json)
    echo "file:// on tmpfs: rclone crypt / coven = $(ratio "$rclone_shm" "$coven_shm")x (target >= 5; issue 38: >= 6); coven / cp = $(ratio "$coven_shm" "$cp_shm")x; load $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -rf "$SHM"
    trap - EXIT
fi

# ---------------------------------------------------------------- memory
eval "$prepare_file"
rss_one=$(rss env COVEN_DB="$BENCH_TMP/run/device.db" "$COVEN" upload-worker --once --jobs 1)
for index in 1 2 3 4; do head -c $((SIZE / 4)) /dev/urandom > "quarter-$index.bin"; done
template "file://$BENCH_TMP/store-four" template-four "$BENCH_TMP"/quarter-{1,2,3,4}.bin
rss_four=$(rss env COVEN_DB="$BENCH_TMP/template-four/device.db" "$COVEN" upload-worker --once --jobs 4)
echo "peak RSS: --jobs 1 $((rss_one / 1024)) MiB (target < 64), --jobs 4 (four files) $((rss_four / 1024)) MiB (target < 128)"
rm -rf template-four store-four quarter-*.bin "$BENCH_TMP/store/files"

# ---------------------------------------------------------------- s3:// (moto on loopback)
if [[ "${SKIP_S3:-0}" == 1 || ! -x "$SHARED/s3/start-s3-server" ]]; then
    echo "s3://: skipped"
    exit 0
fi
"$SHARED/s3/start-s3-server" 0 "$BENCH_TMP/s3.pid" > s3.env 2> s3.err
trap '"$SHARED/s3/stop-s3-server" "$BENCH_TMP/s3.pid" >/dev/null 2>&1 || true' EXIT
eval "$(grep '^export ' s3.env)"
# rclone's AWS SDK cannot use a custom CA bundle with its own transport; loopback needs none.
{ echo; rclone_moto_config bench/rclone; } >> "$rclone_config"
env -u AWS_CA_BUNDLE rclone --config "$rclone_config" mkdir moto:bench
template "s3://bench/coven?endpoint=$AWS_ENDPOINT_URL&path_style=true" template-s3 "$BENCH_TMP/big.bin"
prepare_s3="rm -rf $BENCH_TMP/run && cp -a $BENCH_TMP/template-s3 $BENCH_TMP/run && env -u AWS_CA_BUNDLE rclone --config $rclone_config purge moto:bench/coven/files 2>/dev/null || true"
hyperfine --runs "$RUNS" --export-json s3.json \
    --prepare "$prepare_s3" -n "coven upload-worker (s3://)" "COVEN_DB=$BENCH_TMP/run/device.db $COVEN upload-worker --once --jobs 1" \
    --prepare "env -u AWS_CA_BUNDLE rclone --config $rclone_config purge moto:bench/rclone 2>/dev/null || true" -n "rclone copy (crypt over s3)" "env -u AWS_CA_BUNDLE rclone --config $rclone_config copy $BENCH_TMP/big.bin motocrypt:"
median s3.json
coven_s3=$(jq -r '.results[0].median' s3.json)
rclone_s3=$(jq -r '.results[1].median' s3.json)
echo "s3://: rclone crypt / coven = $(ratio "$rclone_s3" "$coven_s3")x (target > 1)"
