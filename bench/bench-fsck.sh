#!/usr/bin/env bash
# fsck (issue 22), side by side in one run:
#
#   1. a full `coven fsck` of 1 GiB in 2,000 files (512 KiB each) stored on file://, beside
#      `restic check --read-data` of a restic repository holding the same files and `rclone
#      cryptcheck` of an rclone crypt remote holding them, and beside one decrypt + hash pass
#      over the stored objects (`openssl enc -d -aes-256-ctr | openssl dgst -sha256`: AES and SHA-256 over
#      every byte once, two processes on two cores: the machine's limit); target: ahead of both
#      tools, within 1.5x of the pass; peak RSS of coven (target <= 64 MiB);
#   2. `coven fsck --fast` of 100,000 stored files on file://: time and storage requests (its
#      --json `listings`: listings only, a page of 1,000 keys each).
#
# The 100,000 records are written into the device database with sqlite3 and their objects made
# as files of the size the format gives (fsck --fast reads only listings). Environment: COVEN
# and BENCH_TMP from bench/run.sh; BENCH_FSCK_FILES (2000), BENCH_FSCK_FILE_SIZE (524288) and
# BENCH_FSCK_FAST_FILES (100000) change the counts.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

files=${BENCH_FSCK_FILES:-2000}
size=${BENCH_FSCK_FILE_SIZE:-524288}
fast_files=${BENCH_FSCK_FAST_FILES:-100000}
for tool in restic rclone openssl sha256sum sqlite3 python3 jq /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-fsck: $tool is missing" >&2; exit 1; }
done
bench_start fsck

# timed NAME CMD...: runs CMD under /usr/bin/time; sets NAME_s (wall seconds), NAME_cpu (user +
# system seconds) and NAME_rss (peak RSS, MiB). The machine may be shared: CPU seconds say what
# each tool costs whatever else runs.
timed() {
    local name=$1
    shift
    /usr/bin/time -f '%e %U %S %M' -o "$name.time" "$@"
    read -r wall user sys rss < "$name.time"
    printf -v "${name}_s" '%s' "$wall"
    printf -v "${name}_cpu" '%s' "$(python3 -c "print(f'{$user + $sys:.2f}')")"
    printf -v "${name}_rss" '%s' "$(python3 -c "print(f'{$rss / 1024:.1f}')")"
}

cat > coven.json <<'JSON'
{
  "namespaces": [ { "name": "covers", "kind": "app" } ],
  "tables": [ { "name": "settings", "identity": "shared-key", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE settings (id TEXT PRIMARY KEY, value TEXT, file TEXT, _updated_at TEXT NOT NULL DEFAULT '') STRICT" ]
}
JSON

echo "-- 1. full checks of $files files of $size bytes"
mkdir -p src
python3 - src "$files" "$size" <<'PY'
import os, sys
folder, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(f"{folder}/f{i:05d}.bin", "wb") as f:
        f.write(os.urandom(size))
PY
db=$T/a/device.db
"$COVEN" --quiet init --storage "file://$T/store" --manifest coven.json --name a --db "$db" >/dev/null
: > write.sql
for f in src/*.bin; do
    id=$("$COVEN" stage "$f" --namespace covers --db "$db")
    echo "INSERT INTO settings (id, file) VALUES ('$(basename "$f")', coven_put_staged('$id'));" >> write.sql
done
"$COVEN" write --db "$db" < write.sql >/dev/null
"$COVEN" upload-worker --once --db "$db" >/dev/null
stored=$(find store/files -type f | wc -l)
[[ $stored == "$files" ]] || { echo "bench-fsck: $stored objects stored, not $files" >&2; exit 1; }

# Warm every copy into the page cache once, so each tool reads from memory alike.
cat store/files/*/* src/* > /dev/null

"$COVEN" -q fsck --db "$db" >/dev/null  # a first run, as a warm-up
timed coven sh -c '"$0" --json fsck --db "$1" > coven.json.out' "$COVEN" "$db"
jq -e '.objects_checked == '"$files"' and (.problems | length) == 0' coven.json.out >/dev/null \
    || { echo "bench-fsck: coven fsck did not verify every object clean" >&2; cat coven.json.out >&2; exit 1; }

export RESTIC_PASSWORD=bench RESTIC_REPOSITORY=$T/restic
restic init --quiet
restic backup --quiet src >/dev/null
cat restic/data/*/* > /dev/null
timed restic restic check --read-data --quiet

export RCLONE_CONFIG_BENCHCRYPT_TYPE=crypt RCLONE_CONFIG_BENCHCRYPT_REMOTE=$T/crypt
RCLONE_CONFIG_BENCHCRYPT_PASSWORD=$(rclone obscure bench)
export RCLONE_CONFIG_BENCHCRYPT_PASSWORD
rclone copy src benchcrypt: >/dev/null 2>&1
cat crypt/* > /dev/null
timed rclone sh -c 'rclone cryptcheck src benchcrypt: >/dev/null 2>&1'

# The stored objects in one file, read from memory: AES over every byte, then SHA-256 over every
# byte, one process each (two cores), both OpenSSL's (coreutils' sha256sum does not use the CPU's
# SHA instructions here: it alone takes 6.6 s of CPU for 1 GiB, OpenSSL 1.0 s).
cat store/files/*/* > all.bin
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
timed pass sh -c 'openssl enc -d -aes-256-ctr -K "$0" -iv 00000000000000000000000000000000 -nopad -bufsize 1048576 -in all.bin | openssl dgst -sha256 >/dev/null' "$key"
rm all.bin

echo "-- 2. fsck --fast of $fast_files stored files"
fdb=$T/f/device.db
"$COVEN" --quiet init --storage "file://$T/fstore" --manifest coven.json --name f --db "$fdb" >/dev/null
device=$(sqlite3 "$fdb" "SELECT value FROM coven_meta WHERE key = 'device_id'")
python3 - "$fdb" "$fast_files" "$device" "$T/fstore" <<'PY'
import os, sqlite3, sys, uuid
db, n, device, store = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
folder = f"{store}/files/{device}"
os.makedirs(folder, exist_ok=True)
con = sqlite3.connect(db)
stamp = "2026-12-01T00:00:00.000Z-0000-" + device
with con:
    for i in range(n):
        fid = str(uuid.UUID(int=i, version=4))
        coords = '{"at":"stored","key":"%064x","object":"files/%s/bench%07d"}' % (i + 1, device, i)
        con.execute("INSERT INTO coven_files (id, audience, namespace, size, hash, coordinates, _updated_at) VALUES (?, 'store', 'covers', 1, NULL, ?, ?)", (fid, coords, stamp))
        con.execute("INSERT INTO settings (id, value, file, _updated_at) VALUES (?, 'v', ?, ?)", ("s%d" % i, fid, stamp))
        with open(f"{folder}/bench{i:07d}", "wb") as f:
            f.write(b"\0" * 25)  # the size of a sealed 1-byte file
PY
timed fast sh -c '"$0" --json fsck --fast --db "$1" > fast.json' "$COVEN" "$fdb"
fast_listings=$(jq .listings fast.json)
jq -e '.objects_checked == '"$fast_files"' and (.problems | length) == 0' fast.json >/dev/null \
    || { echo "bench-fsck: fsck --fast did not find every object" >&2; jq '{objects_checked, problems: (.problems | length)}' fast.json >&2; exit 1; }

echo
echo "fsck, $files files of $size bytes on file:// (page cache warm; wall s, CPU s, peak RSS):"
echo "  coven fsck                 ${coven_s} s  cpu ${coven_cpu} s  ${coven_rss} MiB (target <= 64)"
echo "  restic check --read-data   ${restic_s} s  cpu ${restic_cpu} s  ${restic_rss} MiB  (coven x$(ratio "$restic_s" "$coven_s") faster)"
echo "  rclone cryptcheck          ${rclone_s} s  cpu ${rclone_cpu} s  ${rclone_rss} MiB  (coven x$(ratio "$rclone_s" "$coven_s") faster)"
echo "  decrypt + hash, one pass   ${pass_s} s  cpu ${pass_cpu} s  (coven at x$(ratio "$coven_s" "$pass_s") of it; target <= 1.5)"
echo "fsck --fast, $fast_files stored files on file://:"
echo "  ${fast_s} s  cpu ${fast_cpu} s  ${fast_rss} MiB, ${fast_listings} storage requests (listings only)"
