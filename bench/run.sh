#!/usr/bin/env bash
# make bench: runs every bench/bench-*.sh in name order against a release build of coven.
#
# Each benchmark script measures one of the quality bars (throughput beside the
# reference tool, peak memory, bytes transferred) with hyperfine or /usr/bin/time, and prints
# its figures. It gets COVEN (the release binary) and BENCH_TMP (a scratch folder removed
# afterwards) in its environment. Add a benchmark by adding a script; this one needs no change.
set -euo pipefail
cd "$(dirname "$0")/.."

# The reference tools the benchmarks compare with (restic, git-annex, rclone, hyperfine).
scripts/setup-test-deps.sh --bench

if ! command -v hyperfine >/dev/null 2>&1; then
    echo "bench: hyperfine is not installed (scripts/setup-test-deps.sh installs it)" >&2
    exit 1
fi

shopt -s nullglob
benchmarks=(bench/bench-*.sh)
if [[ ${#benchmarks[@]} -eq 0 ]]; then
    echo "no benchmarks yet"
    exit 0
fi

# The release build of `make build`: the Swift runtime linked statically.
swift build -c release --static-swift-stdlib
# COVEN is already the static build: the scripts need not build a second one to compare.
export BENCH_READ_STATIC=${BENCH_READ_STATIC:-0}
COVEN=$(pwd)/.build/release/coven
BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/coven-bench.XXXXXX")
trap 'rm -rf "$BENCH_TMP"' EXIT
export COVEN BENCH_TMP

status=0
for benchmark in "${benchmarks[@]}"; do
    echo "== $benchmark"
    # Each benchmark starts with nothing of the last one's left to write back: a gigabyte of
    # dirty pages (a read's cache file, which coven does not sync) would otherwise be flushed
    # during the next one's timed runs, slowing whatever syncs there.
    rm -rf "${BENCH_TMP:?}"/* && sync
    bash "$benchmark" || { echo "bench: $benchmark failed" >&2; status=1; }
done
exit $status
