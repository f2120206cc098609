#!/usr/bin/env bash
# Members (issue 20, "Performance"), side by side in one run, on file://:
#
#   1. a quiet `coven sync` in a store of 10 members x 3 devices whose store key has 20
#      generations, against a quiet sync in a store of 10 devices without members (the same
#      measurement as bench-sync's part 3): target within 10%.
#   2. push and pull of 100,000 rows of about 200 bytes in a store of members (changes of
#      format 2), against sqlite3 inserting the same rows in one transaction: push <= 2x raw,
#      pull <= 3x raw, peak RSS <= 64 MiB each (the bars of bench-sync).
#   3. `coven member add` and `coven member remove` in a store of 30 members: time and the
#      objects each writes.
#
# hyperfine medians. Environment: COVEN and BENCH_TMP from bench/run.sh; BENCH_MEMBERS_ROWS
# changes the row count of part 2.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rows=${BENCH_MEMBERS_ROWS:-100000}
bench_start members
items_manifest
c() { "$COVEN" --quiet "$@"; }

echo "-- 1. quiet sync: 10 devices without members, then 10 members x 3 devices, 20 generations"
c init --storage "file://$T/plain" --manifest coven.json --name p0 --db "$T/p0/device.db" >/dev/null
"$COVEN" key export --db "$T/p0/device.db" > key.txt
for i in $(seq 1 9); do c join "file://$T/plain" --key-file key.txt --name "p$i" --db "$T/p$i/device.db" >/dev/null; done
for i in $(seq 0 9); do c sync --db "$T/p$i/device.db" >/dev/null; done
c sync --db "$T/p1/device.db" >/dev/null

c init --storage "file://$T/members" --manifest coven.json --name m0-0 --db "$T/m0-0/device.db" --member m0 >/dev/null
"$COVEN" member export -o m0.identity --db "$T/m0-0/device.db" >/dev/null
for m in $(seq 1 9); do
    "$COVEN" --quiet member keygen -o "m$m.identity" >/dev/null
    recipient=$(sed -n 's/^# recipient: //p' "m$m.identity")
    c member add "m$m" "$recipient" --db "$T/m0-0/device.db" >/dev/null
done
# Ten more generations: five members added and removed.
for x in $(seq 1 5); do
    "$COVEN" --quiet member keygen -o "x$x.identity" >/dev/null
    c member add "x$x" "$(sed -n 's/^# recipient: //p' "x$x.identity")" --db "$T/m0-0/device.db" >/dev/null
    c member remove "x$x" --db "$T/m0-0/device.db" >/dev/null
done
generations=$(ls "$T/members/audiences/store" | wc -l)
for m in $(seq 0 9); do
    for d in 0 1 2; do
        [[ -e "$T/m$m-$d/device.db" ]] && continue
        c join "file://$T/members" --identity "m$m.identity" --name "m$m-$d" --db "$T/m$m-$d/device.db" >/dev/null
    done
done
for round in 1 2; do for m in $(seq 0 9); do for d in 0 1 2; do c sync --db "$T/m$m-$d/device.db" >/dev/null; done; done; done
hyperfine -N --style basic --runs 100 --warmup 5 --export-json quiet.json \
    --command-name "quiet sync, 10 devices, no members" "$COVEN sync --db $T/p1/device.db" \
    --command-name "quiet sync, 10 members x 3 devices, $generations generations" "$COVEN sync --db $T/m1-1/device.db"
plain=$(median 0 quiet.json); members=$(median 1 quiet.json)

echo
echo "-- 2. push and pull of $rows rows in a store of members"
item_rows "$rows"
c init --storage "file://$T/rows" --manifest coven.json --name a --db "$T/a/device.db" --member alice >/dev/null
"$COVEN" member export -o alice.identity --db "$T/a/device.db" >/dev/null
c join "file://$T/rows" --identity alice.identity --name b --db "$T/b/device.db" >/dev/null
"$COVEN" write --db "$T/a/device.db" - < coven.sql >/dev/null
sqlite3 "$T/a/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
sqlite3 "$T/b/device.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
cp -a a a.before && cp -a b b.before && cp -a rows rows.before
"$COVEN" sync --push --db "$T/a/device.db" > /dev/null
rm -rf rows.pushed && cp -a rows rows.pushed
restore() { rm -rf "$T/$1" && cp -a "$T/$1.before" "$T/$1"; }
export -f restore
export T
restore a; restore rows
hyperfine --shell bash --style basic --runs 3 --warmup 1 --export-json rows.json \
    --command-name "sqlite3 raw insert" --prepare "rm -f $T/raw.db && sqlite3 $T/raw.db \"$table\"" "sqlite3 $T/raw.db < $T/raw.sql" \
    --command-name "coven sync --push (members)" --prepare "restore a; restore rows" "$COVEN sync --push --db $T/a/device.db > /dev/null" \
    --command-name "coven sync --pull (members)" --prepare "restore b; rm -rf $T/rows && cp -a $T/rows.pushed $T/rows" "$COVEN sync --pull --db $T/b/device.db > /dev/null"
raw=$(median 0 rows.json); push=$(median 1 rows.json); pull=$(median 2 rows.json)
restore a; restore b; restore rows
/usr/bin/time -v "$COVEN" sync --push --db "$T/a/device.db" > /dev/null 2> rss-push.txt
/usr/bin/time -v "$COVEN" sync --pull --db "$T/b/device.db" > /dev/null 2> rss-pull.txt
pulled=$(sqlite3 "$T/b/device.db" "SELECT count(*) FROM items")
[[ $pulled == "$rows" ]] || { echo "bench-members: b holds $pulled rows, not $rows" >&2; exit 1; }

echo
echo "-- 3. member add and remove in a store of 30 members"
c init --storage "file://$T/thirty" --manifest coven.json --name t0 --db "$T/t0/device.db" --member t0 >/dev/null
for m in $(seq 1 29); do
    "$COVEN" --quiet member keygen -o "t$m.identity" >/dev/null
    c member add "t$m" "$(sed -n 's/^# recipient: //p' "t$m.identity")" --db "$T/t0/device.db" >/dev/null
done
c join "file://$T/thirty" --identity t29.identity --name t29-0 --db "$T/t29-0/device.db" >/dev/null
"$COVEN" --quiet member keygen -o new.identity >/dev/null
before=$(find "$T/thirty" -type f | wc -l)
start=$(now); "$COVEN" --json member add newcomer "$(sed -n 's/^# recipient: //p' new.identity)" --db "$T/t0/device.db" > add.json; end=$(now)
add_time=$(elapsed "$start" "$end"); add_objects=$(jq .objects_written add.json)
start=$(now); "$COVEN" --json member remove t29 --db "$T/t0/device.db" > remove.json; end=$(now)
remove_time=$(elapsed "$start" "$end"); remove_objects=$(jq .objects_written remove.json)
after=$(find "$T/thirty" -type f | wc -l)
members_now=$("$COVEN" --json members --db "$T/t0/device.db" | jq '.members | length')

echo
echo "== members figures"
printf 'quiet sync, 10 devices, no members:            %.1f ms\n' "$(milliseconds "$plain")"
printf 'quiet sync, 10 members x 3 devices, %s gens:   %.1f ms  (%sx; target <= 1.10x)\n' "$generations" "$(milliseconds "$members")" "$(ratio "$members" "$plain")"
printf 'raw sqlite3 insert of %s rows:             %.3f s\n' "$rows" "$raw"
printf 'coven sync --push (members):                   %.3f s  (%sx raw; target <= 2x)   peak RSS %s MiB (target <= 64)\n' "$push" "$(ratio "$push" "$raw")" "$(peak rss-push.txt)"
printf 'coven sync --pull (members):                   %.3f s  (%sx raw; target <= 3x)   peak RSS %s MiB (target <= 64)\n' "$pull" "$(ratio "$pull" "$raw")" "$(peak rss-pull.txt)"
printf 'member add in a store of 30 members:           %s s, %s objects written\n' "$add_time" "$add_objects"
printf 'member remove (one device) of 31 members:      %s s, %s objects written (store files %s -> %s; %s members after)\n' "$remove_time" "$remove_objects" "$before" "$after" "$members_now"
