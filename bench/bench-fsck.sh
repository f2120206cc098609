#!/usr/bin/env bash
# fsck (issue 22), side by side in one run:
#
#   1. a full `coven fsck` of 1 GiB in 2,000 files (512 KiB each) stored on file://, beside
#      `restic check --read-data` of a restic repository holding the same files and `rclone
#      cryptcheck` of an rclone crypt remote holding them, and beside one decrypt + hash pass
#      over the stored objects (`openssl enc -d -aes-256-ctr | sha256sum`: AES and SHA-256 over
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

/usr/bin/time -v -o coven.time "$COVEN" --json fsck --db "$db" > coven.json.out
coven_s=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' coven.time)
coven_rss=$(peak coven.time)
jq -e '.objects_checked == '"$files"' and (.problems | length) == 0' coven.json.out >/dev/null \
    || { echo "bench-fsck: coven fsck did not verify every object clean" >&2; cat coven.json.out >&2; exit 1; }

export RESTIC_PASSWORD=bench RESTIC_REPOSITORY=$T/restic
restic init --quiet
restic backup --quiet src >/dev/null
cat restic/data/*/* > /dev/null
start=$(now); restic check --read-data --quiet >/dev/null; restic_s=$(elapsed "$start" "$(now)")

export RCLONE_CONFIG_BENCHCRYPT_TYPE=crypt RCLONE_CONFIG_BENCHCRYPT_REMOTE=$T/crypt
RCLONE_CONFIG_BENCHCRYPT_PASSWORD=$(rclone obscure bench)
export RCLONE_CONFIG_BENCHCRYPT_PASSWORD
rclone copy src benchcrypt: >/dev/null 2>&1
cat crypt/* > /dev/null
start=$(now); rclone cryptcheck src benchcrypt: >/dev/null 2>&1; rclone_s=$(elapsed "$start" "$(now)")

key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
start=$(now)
cat store/files/*/* | openssl enc -d -aes-256-ctr -K "$key" -iv 00000000000000000000000000000000 -nopad | sha256sum >/dev/null
pass_s=$(elapsed "$start" "$(now)")

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
/usr/bin/time -v -o fast.time "$COVEN" --json fsck --fast --db "$fdb" > fast.json
fast_s=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s }' fast.time)
fast_rss=$(peak fast.time)
fast_listings=$(jq .listings fast.json)
jq -e '.objects_checked == '"$fast_files"' and (.problems | length) == 0' fast.json >/dev/null \
    || { echo "bench-fsck: fsck --fast did not find every object" >&2; jq '{objects_checked, problems: (.problems | length)}' fast.json >&2; exit 1; }

echo
echo "fsck, $files files of $size bytes on file:// (page cache warm):"
echo "  coven fsck                    ${coven_s} s   peak RSS ${coven_rss} MiB (target <= 64)"
echo "  restic check --read-data      ${restic_s} s   (coven x$(ratio "$restic_s" "$coven_s") faster)"
echo "  rclone cryptcheck             ${rclone_s} s   (coven x$(ratio "$rclone_s" "$coven_s") faster)"
echo "  decrypt + hash, one pass      ${pass_s} s   (coven at x$(ratio "$coven_s" "$pass_s") of it; target <= 1.5)"
echo "fsck --fast, $fast_files stored files on file://:"
echo "  ${fast_s} s, peak RSS ${fast_rss} MiB, ${fast_listings} storage requests (listings only)"
