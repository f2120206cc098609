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
# candidates. Last, the import of MOTO (default 1,000) files of 4-64 KiB to s3:// on the loopback
# moto server, as bench-import.sh does it on file:// (one `stage --user --files-from -z --json`,
# one `write --each`, one `upload-worker --once`), beside `restic backup` to an s3: repository and
# `rclone copy` to a crypt remote over an s3 remote on the same server, of the same files: time,
# peak RSS, CPU (the command's and moto's) and requests per file by method (from moto's log).
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
# Session of 2026-12-02 (fifth), fetch-kept handing each file over as it is recorded (no list of
# them), workers that no longer query the database, look up the free space twice or make the
# cache folder per file, and statements run once per file kept prepared:
#   HUGE=100000 MDO=10000, on disk, the load 0.8-1.7: upload-worker 26.39 s 44.5 MiB, status
#   0.23 s 23.9 MiB, sync (first push) 13.96 s 55.1 MiB, join 7.99 s 61.7 MiB, fetch-kept
#   13.10 s 38.2 MiB (was 33.27 s 82.6 MiB), make-device-only 6.48 s 59.0 MiB, sync (pull)
#   1.18 s 43.2 MiB, lost --json 0.07 s 24.5 MiB, gc 47.92 s 45.5 MiB: every one under 64 MiB.
#   fetch-kept --json of the 100,000 files: 45.5 MiB (its lists spooled past a MiB).
#   SMALL on tmpfs (BENCH_TMP=/dev/shm, no disk in the way; one store, the four tools in turn,
#   three rounds each, the load 0.3-1.3), before (90e02d7) and after:
#     fetch-kept        1.54-1.63 s -> 0.85-1.04 s   (rclone 0.95-1.09 s, restic 1.46-1.56 s)
#     make-device-only  2.86-2.94 s -> 1.72-1.94 s   (1.58-1.95x rclone, 1.14-1.30x restic)
#   SMALL=10000 with BENCH_TMP on tmpfs, this session's last binary, the load 1.8-2.2:
#     up            upload-worker 1.75 s 42.3 MiB (0.86x restic 2.03 s, 1.23x rclone 1.43 s)
#     way back      fetch-kept 0.98 s 28.9 MiB (0.61x restic 1.62 s, 0.99x rclone 0.99 s),
#                   make-device-only 1.72 s 59.2 MiB (1.07x restic, 1.74x rclone)
#   the same on disk, before the statements were kept prepared (load 2.3-3.5): fetch-kept 3.31 s
#   (0.45x restic 7.38 s, 1.56x rclone 2.12 s), make-device-only 3.92 s (0.53x, 1.85x).
#   SMALL=10000 LARGE=300 with BENCH_TMP on tmpfs (before the statements were kept prepared;
#   load 3.3-4.4): small fetch-kept 2.13 s (0.98x restic, 1.28x rclone), make-device-only 4.24 s
#   (1.94x, 2.54x); large fetch-kept 2.49 s (0.71x, 0.69x), make-device-only 1.91 s (0.54x,
#   0.53x), upload-worker 1.55 s (0.22x restic backup, 0.35x rclone copy).
# (the load is the other sessions on the two cores: coven spends about 0.7 CPU-ms a file,
# and loses more to them than restic and rclone do)
# The floor the syncs set, 10,000 new files of 34 KiB: written 1.7 s; each fdatasync'd in
# turn 6.3 s (0.46 ms a sync), eight at a time 2.0 s; one syncfs after them all 0.6 s.
# restic and rclone sync nothing.
#
# SMALL=0 LARGE=0 HUGE=0 MOTO=1000 (36 MB), two runs back to back, the load 3.4-4.6 (`uptime`):
#   coven    4.10 s: stage 0.07 s 28.5 MiB, write --each 0.26 s 30.6 MiB, upload-worker --once
#            3.77 s 48.5 MiB (CPU 0.70 s, moto's 3.32 s); 1,000 requests, 1.000 a file: PUT 1.000
#            (stage and write send none)
#   restic   backup 1.20 s 106.1 MiB (CPU 0.87 s, moto's 0.23 s); 19 requests, 0.019 a file: PUT
#            0.007, GET 0.003, HEAD 0.001, DELETE 0.001, LIST 0.007: coven 3.41x
#   rclone   copy to crypt 7.52 s 76.4 MiB (CPU 1.96 s, moto's 6.27 s); 2,002 requests, 2.002 a
#            file: PUT 1.000, HEAD 1.001, LIST 0.001: coven 0.55x
#   again    coven 3.93 s (upload 3.73 s 46.8 MiB, moto's CPU 2.55 s), restic 1.29 s (3.05x),
#            rclone 7.55 s (0.52x)
#   2 more   (load 3.1-4.2) coven 4.29 and 5.04 s (upload 47.3 and 46.6 MiB), 3.02x and 3.11x
#            restic, 0.54x and 0.45x rclone; the same requests each time
# One object a file needs one PUT, and that is all coven sends: no HEAD before it, no multipart
# for these sizes, no LIST, nothing from stage or write. Its time over S3 is the server's: moto
# spends 2.6-3.8 ms of CPU a request (one Python process, a TCP connection per request: it
# answers `Connection: close`), 3.3 s of the upload's 3.8 s, where coven spends 0.7 ms a file.
# More uploads at once do not help (by hand, the same 1,000 files: --jobs 1, 2, 4, 8 took 5.10,
# 4.24, 4.50, 4.79 s, moto's CPU 3.4-4.1 s each time, peak RSS 44-61 MiB). restic packs the
# 1,000 files into a few objects (7 PUTs with its index, snapshot and lock), so the server does
# 19 requests' work; rclone, a PUT and a HEAD a file, pays twice coven's. 2x restic is missed
# here by the server's cost per request against restic's packing, not by a request coven could
# leave out (the same import on file:// is 1.41x restic: bench-import.sh).
# The runs above passed the staged lines to `write --each` through a file: the pipe
# docs/coven-stage.md shows, `stage --files-from - -z --json | write --each -`, waited forever
# at 90e02d7 (write took the device lock before reading its stdin, and stage takes it between
# its windows; 1,000 files, 3 of 3 tries). Since 56a71f7 write reads a pipe to its end first,
# and this section times the pipe, as a user runs it. At 5e0f352, one run, load 2.3-2.4:
#   coven    3.08 s: stage | write --each 0.16 s 29.4 MiB, upload-worker --once 2.92 s 47.9 MiB
#            (CPU 0.58 s, moto's 2.21 s); PUT 1.000 a file and nothing else
#   restic   1.72 s 93.7 MiB (moto's CPU 0.52 s): coven 1.79x; rclone 5.43 s 76.4 MiB (moto's
#            CPU 4.19 s): coven 0.57x
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
# The import of bench-import.sh (one stage --files-from, one write --each, one upload-worker
# --once) of MOTO small files to s3:// on the loopback moto server, beside restic backup to an
# s3: repository and rclone copy to a crypt remote over an s3 remote on the same server, of the
# same files. moto logs a line per request: each command's requests are the lines it added.
# moto_mark: the log's line count now. moto_requests MARK: the requests since MARK by method, as
# "total PUT GET HEAD POST DELETE LIST" (a GET of the bucket with list-type, prefix, delimiter or
# marker in its query is a LIST; restic's GetBucketLocation, `?location=`, is a GET).
moto_mark() { wc -l < "$T/s3.log"; }
moto_requests() {
    tail -n +"$(( $1 + 1 ))" "$T/s3.log" | python3 -c '
import re, sys
counts = dict.fromkeys(["PUT", "GET", "HEAD", "POST", "DELETE", "LIST"], 0)
for line in sys.stdin:
    m = re.search(r"\"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/", line)
    if not m or m.group(2).startswith("/moto-api/"):
        continue
    method, target = m.groups()
    path, _, query = target.partition("?")
    if method == "GET" and "/" not in path.strip("/") and re.search(r"(^|&)(list-type|prefix|delimiter|marker)=", query):
        method = "LIST"
    counts[method] += 1
print(sum(counts.values()), *counts.values())'
}
# per_file "TOTAL PUT GET HEAD POST DELETE LIST": the requests and their number a file, by
# method (a method not sent left out).
per_file() {
    python3 -c '
import sys
files, total, *counts = map(int, sys.argv[1:])
names = ["PUT", "GET", "HEAD", "POST", "DELETE", "LIST"]
split = ", ".join(f"{name} {count / files:.3f}" for name, count in zip(names, counts) if count) or "none"
print(f"{total} requests, {total / files:.3f} a file: {split}")' "$MOTO" $1
}

# cpu: the user + system seconds of the last timed command; moto_cpu: the server's so far.
cpu() { awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$T/time.out"; }
moto_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$S3_SERVER_PID/stat"; }

if [[ $MOTO -gt 0 ]] && start_moto wayback; then
    M=$T/moto
    mkdir -p "$M/dev"
    echo "== $MOTO files of 4-64 KiB to moto on $AWS_ENDPOINT_URL (load $(uptime | sed 's/.*load average: //'))"
    files "$M/src" "$MOTO" 4096 65536
    echo "   $(du -sh "$M/src" | cut -f1) in all"
    cat "$M"/src/* > /dev/null
    COVEN_DB=$M/dev/device.db "$COVEN" init --storage "s3://wayback/store?endpoint=$AWS_ENDPOINT_URL&path_style=true" --manifest "$T/coven.json" >/dev/null 2>&1
    (cd "$M" && find src -type f -print0 > list0)
    insert="INSERT INTO tracks (id, title, file, _updated_at) VALUES (coven_uuid7(), :path, coven_put_user_file('originals', :id, 'cloud'), coven_stamp())"
    declare -A moto_secs moto_rss moto_sent moto_use
    # moto_step NAME CMD...: timed, with its seconds, peak MiB, requests and CPU seconds (its
    # own and the server's) kept under NAME.
    moto_step() {
        local step=$1 mark server; shift
        mark=$(moto_mark)
        server=$(moto_cpu)
        timed "moto: $step" "$@"
        moto_secs[$step]=$last
        moto_rss[$step]=$(peak "$T/time.out")
        moto_sent[$step]=$(moto_requests "$mark")
        moto_use[$step]="CPU $(cpu) s, moto's $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$server" "$(moto_cpu)") s"
    }
    cd "$M"
    # The import as a user runs it: one pipe from the list through stage into write (the peak
    # RSS is the larger of the two).
    moto_step "stage | write" env COVEN_DB="$M/dev/device.db" COVEN="$COVEN" INSERT="$insert" bash -c \
        'set -o pipefail; "$COVEN" --json stage --user --namespace originals --files-from - -z < list0 | "$COVEN" write --each - "$INSERT"'
    moto_step upload env COVEN_DB="$M/dev/device.db" "$COVEN" upload-worker --once
    cd "$T"
    put=$(COVEN_DB=$M/dev/device.db "$COVEN" sql "SELECT count(*) FROM tracks")
    queued=$(COVEN_DB=$M/dev/device.db "$COVEN" sql "SELECT count(*) FROM coven_uploads")
    [[ $put == "$MOTO" && $queued == 0 ]] || { echo "bench-wayback: coven put $put of $MOTO files on moto, $queued still queued" >&2; exit 1; }
    # restic: a repository on the same server (its init is not counted, as coven's is not).
    restic -r "s3:$AWS_ENDPOINT_URL/wayback/restic" init >/dev/null 2>&1
    moto_step restic restic -r "s3:$AWS_ENDPOINT_URL/wayback/restic" --quiet backup "$M/src" --no-cache
    # rclone: a crypt remote over an s3 remote on the same server (its AWS SDK cannot take the
    # machine's AWS_CA_BUNDLE, and loopback needs none).
    rclone_moto_config wayback/rclone > "$T/rclone-moto.conf"
    moto_step rclone env -u AWS_CA_BUNDLE rclone --config "$T/rclone-moto.conf" copy "$M/src" motocrypt:
    read -r -a a <<< "${moto_sent[stage | write]}"
    read -r -a c <<< "${moto_sent[upload]}"
    coven_sent=""
    for i in 0 1 2 3 4 5 6; do coven_sent+="$(( a[i] + c[i] )) "; done
    coven_secs=$(python3 -c "import sys; print(f'{sum(map(float, sys.argv[1:])):.3f}')" "${moto_secs[stage | write]}" "${moto_secs[upload]}")
    echo "   (load $(uptime | sed 's/.*load average: //') after)"
    echo "   coven  $coven_secs s, $(per_file "$coven_sent")"
    echo "          stage --files-from | write --each ${moto_secs[stage | write]} s ${moto_rss[stage | write]} MiB (${moto_use[stage | write]}), $(per_file "${moto_sent[stage | write]}")"
    echo "          upload-worker --once ${moto_secs[upload]} s ${moto_rss[upload]} MiB (${moto_use[upload]}), $(per_file "${moto_sent[upload]}")"
    echo "   restic backup ${moto_secs[restic]} s ${moto_rss[restic]} MiB (${moto_use[restic]}), $(per_file "${moto_sent[restic]}")"
    echo "   rclone copy to crypt ${moto_secs[rclone]} s ${moto_rss[rclone]} MiB (${moto_use[rclone]}), $(per_file "${moto_sent[rclone]}")"
    echo "   coven / restic $(ratio "$coven_secs" "${moto_secs[restic]}")x, coven / rclone $(ratio "$coven_secs" "${moto_secs[rclone]}")x"
    kill "$S3_SERVER_PID" 2>/dev/null || true
    # One object a file needs one PUT: more than that is a request to account for.
    read -r -a all <<< "$coven_sent"
    if (( all[0] > MOTO )); then
        echo "bench-wayback: coven sent ${all[0]} requests for $MOTO files, more than the one object a file needs" >&2
        exit 1
    fi
    rm -rf "$M"
elif [[ $MOTO -gt 0 ]]; then
    echo "== moto: skipped (the server did not start: $T/s3.log)"
fi
echo
column -t -s $'\t' "$T/figures"
