#!/usr/bin/env bash
# What Swift's runtime checks cost (issue 34, "Release builds keep Swift's checks"): the release
# build (`-O`, overflow and bounds checks on, the code that parses bytes from storage included)
# beside the same sources built with `-Ounchecked`, as the engine was built before, on the hot
# paths the quality bars time, interleaved in one hyperfine run each, on tmpfs (/dev/shm: the
# engine's CPU, not the disk's syncs):
#
#   1. seal and store one 1 GiB original (`upload-worker --once --jobs 1`, file://);
#   2. a warm full read of it (`cat` from the store, the file cache cleared each run);
#   3. `sync --push` of 100,000 new rows, and 4. `sync --pull` of them on a second device.
#
# The unchecked build goes to .build/unchecked (built once, reused). Environment: COVEN and
# BENCH_TMP from bench/run.sh; COVEN_UNCHECKED (an -Ounchecked build to use); BENCH_CHECKS_RUNS
# (default 5); BENCH_CHECKS_SIZE (MiB, default 1024); BENCH_CHECKS_ROWS (default 100000).
#
# Measured on this project's machine (2 vCPUs, tmpfs, 2026-12-03, BENCH_CHECKS_RUNS=7, load
# 1.2-1.8, the sixth session's sources): what the checks cost is within the noise of shared cores.
#                          -O (checks on)      -Ounchecked        wall    user CPU
#   seal+store 1 GiB       0.772 s (0.786 u)   0.743 s (0.732 u)  1.04x   1.07x
#   full read (cat)        1.659 s (0.715 u)   1.422 s (0.754 u)  1.17x   0.95x   (system time wanders)
#   sync --push 100,000    0.501 s (0.336 u)   0.511 s (0.327 u)  0.98x   1.03x
#   sync --pull 100,000    0.673 s (0.573 u)   0.664 s (0.555 u)  1.01x   1.03x
# A first run with RUNS=5 had the -O upload's median at 1.71 s against 0.90 s: the same user
# CPU (0.75 s each), 2.1 s of system time against 0.8 s (tmpfs page allocation right after the
# 1 GiB original was written), its fastest run 0.81 s. No hot loop needed unchecked access.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
runs=${BENCH_CHECKS_RUNS:-5}
size_mib=${BENCH_CHECKS_SIZE:-1024}
rows=${BENCH_CHECKS_ROWS:-100000}
bench_start checks
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

# The same sources with -Ounchecked (swiftc takes the last optimization flag it is given), unless
# COVEN_UNCHECKED names such a binary already.
UNCHECKED=${COVEN_UNCHECKED:-}
if [[ -z $UNCHECKED ]]; then
    (cd "$ROOT" && swift build -c release --static-swift-stdlib --build-path .build/unchecked -Xswiftc -Ounchecked >/dev/null)
    UNCHECKED=$ROOT/.build/unchecked/release/coven
fi
CHECKED=$COVEN

SHM=${BENCH_CHECKS_SHM:-/dev/shm}/coven-checks-$$
rm -rf "$SHM" && mkdir -p "$SHM"
trap 'rm -rf "$SHM"' EXIT

echo
echo "-- 1 and 2: seal and store a ${size_mib} MiB original, then read it whole (tmpfs)"
head -c $((size_mib * 1048576)) /dev/urandom > "$SHM/big.bin"
cat > "$SHM/coven.json" <<'EOF'
{ "namespaces": [ { "name": "originals", "kind": "user", "budget": "4GiB" } ],
  "tables": [ { "name": "notes", "identity": "uuid", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE notes (id TEXT PRIMARY KEY, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
EOF
export COVEN_DB=$SHM/template/device.db
"$CHECKED" --quiet init --storage "file://$SHM/store" --manifest "$SHM/coven.json" --no-member >/dev/null
staged=$("$CHECKED" stage --user "$SHM/big.bin" --namespace originals)
file=$("$CHECKED" write "INSERT INTO notes VALUES (coven_uuid7(), coven_put_user_file('$staged'), '')")
unset COVEN_DB
prepare="rm -rf $SHM/run $SHM/store/files $SHM/store/.uploads && cp -a $SHM/template $SHM/run"
hyperfine --style basic --runs "$runs" --export-json upload.json \
    --prepare "$prepare" -n "upload -O" "COVEN_DB=$SHM/run/device.db $CHECKED upload-worker --once --jobs 1" \
    --prepare "$prepare" -n "upload -Ounchecked" "COVEN_DB=$SHM/run/device.db $UNCHECKED upload-worker --once --jobs 1"
COVEN_DB=$SHM/run/device.db "$CHECKED" upload-worker --once --jobs 1 >/dev/null
clear="COVEN_DB=$SHM/run/device.db $CHECKED --quiet cache clear"
hyperfine --style basic --runs "$runs" --export-json read.json \
    --prepare "$clear" -n "cat -O" "COVEN_DB=$SHM/run/device.db $CHECKED cat $file > /dev/null" \
    --prepare "$clear" -n "cat -Ounchecked" "COVEN_DB=$SHM/run/device.db $UNCHECKED cat $file > /dev/null"
rm -f "$SHM/big.bin"; rm -rf "$SHM/run" "$SHM/template" "$SHM/store"

echo
echo "-- 3 and 4: sync --push and --pull of $rows rows (tmpfs)"
cd "$SHM"
items_manifest
item_rows "$rows"
"$CHECKED" --quiet init --storage "file://$SHM/store" --manifest coven.json --name a --db "$SHM/a/device.db" >/dev/null
"$CHECKED" key export --db "$SHM/a/device.db" > key.txt
"$CHECKED" --quiet join "file://$SHM/store" --key-file key.txt --name b --db "$SHM/b/device.db" >/dev/null
"$CHECKED" write --db "$SHM/a/device.db" - < coven.sql >/dev/null
cp -a a a.before && cp -a b b.before && cp -a store store.before
"$CHECKED" sync --push --db "$SHM/a/device.db" >/dev/null
cp -a store store.pushed
back() { echo "rm -rf $SHM/$1 $SHM/store && cp -a $SHM/$1.before $SHM/$1 && cp -a $SHM/$2 $SHM/store"; }
hyperfine --style basic --runs "$runs" --export-json sync.json \
    --prepare "$(back a store.before)" -n "push -O" "$CHECKED sync --push --db $SHM/a/device.db > /dev/null" \
    --prepare "$(back a store.before)" -n "push -Ounchecked" "$UNCHECKED sync --push --db $SHM/a/device.db > /dev/null" \
    --prepare "$(back b store.pushed)" -n "pull -O" "$CHECKED sync --pull --db $SHM/b/device.db > /dev/null" \
    --prepare "$(back b store.pushed)" -n "pull -Ounchecked" "$UNCHECKED sync --pull --db $SHM/b/device.db > /dev/null"
cd "$T"

echo
echo "-- what the checks cost (medians, -O / -Ounchecked; load $(cut -d' ' -f1-3 /proc/loadavg))"
for pair in "upload.json 0 1 seal+store ${size_mib} MiB" "read.json 0 1 full read" "$SHM/sync.json 0 1 push" "$SHM/sync.json 2 3 pull"; do
    set -- $pair
    checked=$(median "$2" "$1"); unchecked=$(median "$3" "$1")
    # User CPU is the figure the checks change; wall time on tmpfs also carries the kernel's
    # page allocation, which wanders by a second from one run to the next on shared cores.
    user_checked=$(jq -r ".results[$2].user" "$1"); user_unchecked=$(jq -r ".results[$3].user" "$1")
    printf '%-22s -O %7.3f s (user %6.3f)   -Ounchecked %7.3f s (user %6.3f)   wall %sx, user CPU %sx\n' "${*:4}" "$checked" "$user_checked" \
        "$unchecked" "$user_unchecked" "$(ratio "$checked" "$unchecked")" "$(ratio "$user_checked" "$user_unchecked")"
done
