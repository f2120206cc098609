#!/usr/bin/env bash
# Installs from apt what `make test` needs and this machine lacks: the -dev packages coven links
# against, the shells the completion tests load scripts in, the tools the benchmarks compare
# with, and python3 with pip for the S3 test server the tests start. When everything is there it
# does nothing, not even `apt-get update`.
#
# With --build, only what building coven needs (the -dev packages): `make demo` uses that.
# With --bench, also the reference tools only `make bench` compares with (restic, git-annex):
# they are large, so `make test` does not install them.
set -euo pipefail

# package:probe — a probe is a command on PATH, or a file that shows the package is there.
wanted=(
    libsqlite3-dev:/usr/include/sqlite3.h
    libgcrypt20-dev:/usr/include/gcrypt.h
    libcurl4-openssl-dev:/usr/include/*/curl/curl.h
    libarchive-dev:/usr/include/archive.h
    zsh:zsh
    fish:fish
    rclone:rclone
    hyperfine:hyperfine
    time:/usr/bin/time
    sqlite3:sqlite3
    zstd:zstd
    jq:jq
    python3:python3
    strace:strace
    bsdutils:script
)

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

present() {
    local package=$1 probe=$2
    installed "$package" && return 0
    if [[ $probe == /* ]]; then compgen -G "$probe" >/dev/null; else command -v "$probe" >/dev/null 2>&1; fi
}

if [[ ${1-} == --build ]]; then
    wanted=("${wanted[@]:0:4}")
elif [[ ${1-} == --bench ]]; then
    wanted+=(restic:restic git-annex:git-annex)
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/setup-test-deps.sh [--build | --bench]" >&2
    exit 2
fi

missing=()
for entry in "${wanted[@]}"; do
    present "${entry%%:*}" "${entry#*:}" || missing+=("${entry%%:*}")
done
if [[ ${#wanted[@]} -gt 4 ]] && command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
    missing+=(python3-pip)
fi

if ! command -v swift >/dev/null 2>&1; then
    echo "setup-test-deps: swift is not on PATH; install a Swift 6 toolchain from https://www.swift.org/install/linux/" >&2
    exit 1
fi

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "setup-test-deps: everything is installed"
    exit 0
fi

echo "setup-test-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup-test-deps: run as root or install sudo, to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
