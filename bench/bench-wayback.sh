#!/usr/bin/env bash
# bench-wayback.sh: a library's upload and its way back, per batch, beside restic and rclone.
#
# Two sets on file:// (SMALL files of 4-64 KiB, default 10,000; LARGE files of 1-8 MiB,
# default 1,000), each stored the real way (one `coven stage --user --files-from`, one `coven write -`):
#   up         coven upload-worker --once  vs  restic backup  vs  rclone copy to a crypt remote
#   way back   coven fetch-kept (every file, into an empty cache) and coven make-device-only
#              (every file, into a folder)  vs  restic restore  vs  rclone copy from the crypt remote
# (target: the way back within 2x of restic and rclone). Then, on HUGE files (default 100,000
# copies of one 4 KiB file, staged once and cloned in coven_staged: the staging of 100,000
# files is bench-stage.sh's job), peak RSS (target <= 64 MiB) and time of: upload-worker,
# status, sync (the first push of HUGE file records), join (of them), fetch-kept,
# make-device-only of MDO (10,000), lost --json of LOST (10,000) lost values, gc with HUGE
# candidates; and the import of MOTO (default 1,000) small files on moto: requests per file.
#
# SMALL=10000 LARGE=0 HUGE=0 MOTO=0 on this machine (2 cores shared, ext4 on virtio), each line
# one run beside restic 0.14 restore and rclone 1.60 copy from a crypt remote in the same run:
#   before the batches   fetch-kept 17.07 s (5.31x restic, 4.87x rclone, 32.8 MiB),
#                        make-device-only 13.18 s (4.10x, 3.76x, 61.1 MiB)
#   after (load 3)       fetch-kept 5.18 s (1.54x restic 3.37 s, 1.85x rclone 2.80 s, 35.3 MiB),
#                        make-device-only 5.38 s (1.60x, 1.92x, 60.2 MiB)
#   after (load 4.4)     fetch-kept 8.80 s (2.22x restic 3.95 s, 2.14x rclone 4.12 s, 33.7 MiB),
#                        make-device-only 9.10 s (2.30x, 2.21x, 61.9 MiB)
#   a connection per     fetch-kept 4.02 s (1.46x restic 2.75 s, 2.08x rclone 1.93 s, 32.7 MiB),
#   worker (load 3.5-4)  make-device-only 8.57 s (3.12x, 4.43x, 59.4 MiB); upload-worker 6.04 s
#                        (2.94x restic backup 2.06 s, 2.91x rclone 2.08 s, 42.4 MiB)
# LARGE=1000 (4.5 GB), the same run, the load rising from 3.9 to 7.2 and back to 2.6:
#                        fetch-kept 17.95 s (0.76x restic 23.70 s, 2.31x rclone 7.78 s, 56.7 MiB),
#                        make-device-only 8.12 s (0.34x, 1.04x, 48.0 MiB); upload-worker 14.83 s
#                        (0.48x restic backup 31.06 s, 0.48x rclone 30.98 s, 41.2 MiB)
# Before and after keeping each worker's connection, carry and run buffer from file to file:
# fetch-kept of 1,000 of the SMALL files makes 34,164 system calls, not 41,544 (strace -c; the
# mmap and munmap of a run buffer per file gone, futex 8,421 -> 4,946), and over S3 a TCP (and
# TLS) connection per file is saved: 24 files by two workers open at most 4, not 24
# (ReadS3Tests). The wall time does not show it through this machine's noise: the two binaries in
# turn on one SMALL store, 12 runs each at a load of 3-7, took 3.3-20.2 s before and 6.5-21.6 s
# after, the user CPU 1.7-2.4 s either way, the system time swinging from 2.3 to 22 s from run to
# run with the disk's writeback (make-device-only 9.2-10.3 s either way).
# `coven get --files-from` of the 10,000 SMALL files into an empty cache, the binary before its
# batches and after in turn on one store: 26.11 s (user 6.81 s, 36.7 MiB) before, 20.50 s (user
# 2.34 s, 33.2 MiB) after at a load of 2.7-3.3; 23.17 s (user 5.68 s, 35.0 MiB) before, 8.08 s
# (user 1.75 s, 31.4 MiB) after at a load of 5.6-5.8.
# HUGE=100000 MDO=10000 (SMALL=0 LARGE=0 MOTO=0), one run, the load 0.6-3.6: upload-worker
# 39.56 s 44.3 MiB, status 0.26 s 24.1 MiB, sync (first push) 14.27 s 53.3 MiB, join 8.93 s
# 61.7 MiB, fetch-kept 33.27 s 82.6 MiB, make-device-only 9.76 s 57.5 MiB, sync (pull of 10,000)
# 1.66 s 41.6 MiB, lost --json 0.07 s 24.5 MiB, gc 69.00 s 45.6 MiB. fetch-kept is over the
# 64 MiB target, before its connection per worker as after (84.1 and 83.4 MiB before, 81.8 and
# 83.7 after, the two binaries in turn on one store at a load of 4-5; 45-80 s either way).
# (the load is the other sessions on the two cores: coven spends about 0.7 CPU-ms a file,
# and loses more to them than restic and rclone do)
# The floor the syncs set, 10,000 new files of 34 KiB: written 1.7 s; each fdatasync'd in
# turn 6.3 s (0.46 ms a sync), eight at a time 2.0 s; one syncfs after them all 0.6 s.
# restic and rclone sync nothing.
#
# Everything is on disk under BENCH_TMP, with `sync` before each timed command (coven syncs
# each object it stores; restic and rclone do not). One run per figure (RUNS is not used:
# the sets are large). Run by bench/run.sh (COVEN, BENCH_TMP); alone:
# COVEN=$PWD/.build/release/coven BENCH_TMP=$(mktemp -d) bash bench/bench-wayback.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_start wayback
SMALL=${SMALL:-10000}
LARGE=${LARGE:-1000}
HUGE=${HUGE:-100000}
MDO=${MDO:-10000}
LOST=${LOST:-10000}
MOTO=${MOTO:-1000}
for tool in restic rclone python3 sqlite3 /usr/bin/time; do
    command -v "$tool" >/dev/null 2>&1 || { echo "bench-wayback: $tool is not installed (make bench installs it)" >&2; exit 1; }
done
export RESTIC_PASSWORD=coven-bench-password
rclone_config=$T/rclone.conf

cat > coven.json <<'JSON'
{ "namespaces": [ { "name": "originals", "kind": "user", "budget": "64GiB", "kept": true } ],
  "tables": [ { "name": "tracks", "identity": "uuid", "files": [ { "column": "file" } ] } ],
  "migrations": [ "CREATE TABLE tracks (id TEXT PRIMARY KEY, title TEXT, file TEXT, _updated_at TEXT NOT NULL) STRICT" ] }
JSON

# timed NAME CMD...: runs CMD after a sync, prints "NAME<TAB>seconds<TAB>peak MiB" into
# $T/figures and keeps the seconds in $last.
timed() {
    local name=$1; shift
    sync
    local start end
    start=$(now)
    /usr/bin/time -v -o "$T/time.out" "$@" > "$T/out.txt" 2> "$T/err.txt" || {
        echo "bench-wayback: $name failed:" >&2; tail -5 "$T/err.txt" >&2; tail -3 "$T/out.txt" >&2; return 1; }
    end=$(now)
    last=$(elapsed "$start" "$end")
    printf '%s\t%s\t%s\n' "$name" "$last" "$(peak "$T/time.out")" | tee -a "$T/figures"
}

# files DIR COUNT MIN MAX: COUNT files of random bytes, MIN to MAX bytes each.
files() {
    mkdir -p "$1"
    python3 - "$@" <<'PY'
import os, random, sys
folder, count, low, high = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(23)
for i in range(count):
    with open(f"{folder}/track-{i:06d}.bin", "wb") as f:
        f.write(os.urandom(r.randint(low, high)))
PY
}

# device DIR STORE: a device at DIR/device.db on file://STORE.
device() {
    mkdir -p "$1"
    COVEN_DB=$1/device.db "$COVEN" init --storage "file://$2" --manifest "$T/coven.json" >/dev/null 2>&1
}

# put_all DB < IDS: one write putting every staged id (one a line) in a tracks row; the file
# ids on stdout.
put_all() {
    { echo -n "INSERT INTO tracks VALUES "
      awk 'NR > 1 { printf "," } { printf "(coven_uuid7(), '"'"'track %d'"'"', coven_put_user_file('"'"'%s'"'"'), '"'"''"'"')", NR, $1 }'
      echo ";"; } | COVEN_DB=$1 "$COVEN" write -
}

# ---------------------------------------------------------------- the two sets
bench_set() {
    local name=$1 count=$2 low=$3 high=$4
    local S=$T/$name
    mkdir -p "$S"
    echo "== $name: $count files of $low-$high bytes"
    files "$S/src" "$count" "$low" "$high"
    echo "   $(du -sh "$S/src" | cut -f1) in all"
    device "$S/dev" "$S/store"
    local start
    start=$(now)
    printf '%s\n' "$S"/src/* | COVEN_DB=$S/dev/device.db "$COVEN" stage --user --files-from - --namespace originals | cut -f1 > "$S/ids"
    put_all "$S/dev/device.db" < "$S/ids" > "$S/files"
    echo "   staged (one stage --files-from) and written in $(elapsed "$start" "$(now)" 1) s"
    # up
    timed "$name: coven upload-worker --once" env COVEN_DB="$S/dev/device.db" "$COVEN" upload-worker --once
    local up=$last
    timed "$name: restic backup" restic -r "$S/restic" --quiet backup "$S/src" --no-cache -o local.connections=2 2>/dev/null || {
        restic -r "$S/restic" init --quiet >/dev/null
        timed "$name: restic backup" restic -r "$S/restic" --quiet backup "$S/src" --no-cache
    }
    local restic_up=$last
    cat > "$rclone_config" <<CONF
[crypt-$name]
type = crypt
remote = $S/rclone
password = $(rclone obscure coven-bench-password)
password2 = $(rclone obscure coven-bench-salt)
CONF
    timed "$name: rclone copy to crypt" rclone --config "$rclone_config" copy "$S/src" "crypt-$name:"
    local rclone_up=$last
    echo "   up: coven $up s, restic $restic_up s, rclone crypt $rclone_up s; coven / restic $(ratio "$up" "$restic_up")x, coven / rclone $(ratio "$up" "$rclone_up")x"
    cp -a "$S/dev" "$S/uploaded"
    # way back
    timed "$name: coven fetch-kept" env COVEN_DB="$S/dev/device.db" "$COVEN" fetch-kept
    local fetch=$last
    rm -rf "$S/dev" && cp -a "$S/uploaded" "$S/dev"
    mkdir -p "$S/back"
    paste "$S/files" <(cd "$S/src" && ls) > "$S/list"
    timed "$name: coven make-device-only" env COVEN_DB="$S/dev/device.db" "$COVEN" make-device-only --folder "$S/back" < "$S/list"
    local mdo=$last
    cmp -s "$S/src/$(ls "$S/src" | tail -1)" "$S/back/$(ls "$S/src" | tail -1)" || { echo "bench-wayback: a copy differs" >&2; exit 1; }
    timed "$name: restic restore" restic -r "$S/restic" --quiet restore latest --target "$S/restic-back" --no-cache
    local restic_back=$last
    timed "$name: rclone copy from crypt" rclone --config "$rclone_config" copy "crypt-$name:" "$S/rclone-back"
    local rclone_back=$last
    echo "   way back: fetch-kept $fetch s, make-device-only $mdo s, restic restore $restic_back s, rclone $rclone_back s"
    echo "   fetch-kept / restic $(ratio "$fetch" "$restic_back")x, / rclone $(ratio "$fetch" "$rclone_back")x; make-device-only / restic $(ratio "$mdo" "$restic_back")x, / rclone $(ratio "$mdo" "$rclone_back")x (target <= 2)"
    rm -rf "$S"
}

[[ $SMALL -gt 0 ]] && bench_set small "$SMALL" 4096 65536
[[ $LARGE -gt 0 ]] && bench_set large "$LARGE" 1048576 8388608

# ---------------------------------------------------------------- HUGE files: peak RSS
# clones DB DIR COUNT: COUNT copies of one 4 KiB file in DIR (same size and modification time),
# the first staged by coven, the others cloned from its coven_staged row; staged ids on stdout.
clones() {
    local db=$1 dir=$2 count=$3
    mkdir -p "$dir"
    head -c 4096 /dev/urandom > "$dir/c0"
    local first
    first=$(COVEN_DB=$db "$COVEN" stage --user "$dir/c0" --namespace originals)
    python3 - "$db" "$dir" "$count" "$first" <<'PY'
import os, sqlite3, sys, uuid
db, folder, count, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
source = os.stat(f"{folder}/c0")
with open(f"{folder}/c0", "rb") as f: data = f.read()
c = sqlite3.connect(db)
row = c.execute("SELECT kind, namespace, place, size, modified_seconds, modified_nanos, change_stamp, content_hash, chunk_hashes, created_at FROM coven_staged WHERE id = ?", (first,)).fetchone()
ids = [first]
rows = []
for i in range(1, count):
    path = f"{folder}/c{i}"
    with open(path, "wb") as f: f.write(data)
    os.utime(path, ns=(source.st_atime_ns, source.st_mtime_ns))
    staged = str(uuid.uuid4())
    ids.append(staged)
    rows.append((staged, row[0], row[1], row[2], os.fsencode(os.path.abspath(path))) + row[3:])
c.executemany("INSERT INTO coven_staged (id, kind, namespace, place, path, size, modified_seconds, modified_nanos, change_stamp, content_hash, chunk_hashes, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
c.commit()
print("\n".join(ids))
PY
}

if [[ $HUGE -gt 0 ]]; then
    H=$T/huge
    echo "== $HUGE files of 4 KiB (cloned staging)"
    device "$H/a" "$H/store"
    clones "$H/a/device.db" "$H/src" "$HUGE" > "$H/ids"
    put_all "$H/a/device.db" < "$H/ids" > "$H/files"
    A=(env COVEN_DB="$H/a/device.db" "$COVEN")
    B=(env COVEN_DB="$H/b/device.db" "$COVEN")
    timed "huge: upload-worker --once ($HUGE files)" "${A[@]}" upload-worker --once
    timed "huge: status" "${A[@]}" status
    timed "huge: sync (first push of $HUGE file records)" "${A[@]}" sync
    "${A[@]}" key export > "$H/key"
    mkdir -p "$H/b"
    timed "huge: join ($HUGE file records)" "${B[@]}" join "file://$H/store" --key-file "$H/key" --name b
    timed "huge: fetch-kept ($HUGE files)" "${A[@]}" fetch-kept
    head -n "$MDO" "$H/files" | awk '{ printf "%s\tm%06d.bin\n", $1, NR }' > "$H/mdo"
    mkdir -p "$H/back"
    timed "huge: make-device-only ($MDO files)" "${A[@]}" make-device-only --folder "$H/back" < "$H/mdo"
    # LOST lost values: both devices change the same rows without seeing each other's change.
    "${A[@]}" write "UPDATE tracks SET title = 'a' WHERE id IN (SELECT id FROM tracks ORDER BY id LIMIT $LOST)" >/dev/null
    "${B[@]}" write "UPDATE tracks SET title = 'b' WHERE id IN (SELECT id FROM tracks ORDER BY id LIMIT $LOST)" >/dev/null
    "${A[@]}" sync >/dev/null
    timed "huge: sync (pull of $LOST concurrent changes)" "${B[@]}" sync
    lost=$("${B[@]}" sql "SELECT count(*) FROM coven_lost_values")
    [[ $lost -eq 0 ]] && { "${A[@]}" sync >/dev/null; B=("${A[@]}"); lost=$("${B[@]}" sql "SELECT count(*) FROM coven_lost_values"); }
    timed "huge: lost --json ($lost lost values)" "${B[@]}" lost --json
    # gc: every record deleted; each device syncs so that its frontier includes the delete.
    "${A[@]}" write "DELETE FROM tracks" >/dev/null
    "${A[@]}" sync >/dev/null && env COVEN_DB="$H/b/device.db" "$COVEN" sync >/dev/null
    candidates=$("${A[@]}" sql "SELECT count(*) FROM coven_gc_candidates" 2>/dev/null || echo "?")
    timed "huge: gc ($candidates candidates)" "${A[@]}" gc
    rm -rf "$H"
fi

# ---------------------------------------------------------------- the import on moto
if [[ $MOTO -gt 0 ]] && start_moto wayback; then
    M=$T/moto
    echo "== $MOTO files of 4-64 KiB to moto"
    files "$M/src" "$MOTO" 4096 65536
    mkdir -p "$M/dev"
    COVEN_DB=$M/dev/device.db "$COVEN" init --storage "s3://wayback/store?endpoint=$AWS_ENDPOINT_URL&path_style=true" --manifest "$T/coven.json" >/dev/null 2>&1
    for f in "$M"/src/*; do COVEN_DB=$M/dev/device.db "$COVEN" stage --user "$f" --namespace originals; done > "$M/ids"
    put_all "$M/dev/device.db" < "$M/ids" > "$M/files"
    moto_requests() { grep -cE '"(GET|PUT|POST|HEAD|DELETE) ' "$T/s3.log" 2>/dev/null || true; }
    moto_puts() { grep -cE '"PUT /wayback/store/files/' "$T/s3.log" 2>/dev/null || true; }
    before=$(moto_requests)
    puts_before=$(moto_puts)
    timed "moto: upload-worker --once ($MOTO files)" env COVEN_DB="$M/dev/device.db" "$COVEN" upload-worker --once
    requests=$(( $(moto_requests) - before ))
    puts=$(( $(moto_puts) - puts_before ))
    echo "   moto: $MOTO files in $last s: $requests requests ($puts object PUTs), $(ratio "$requests" "$MOTO") a file"
fi
echo
column -t -s $'\t' "$T/figures"
