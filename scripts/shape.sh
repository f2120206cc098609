#!/usr/bin/env bash
# The shape of the engine, measured from the sources (issue 36's figures):
#
#   scripts/shape.sh            the figures, one per line
#   scripts/shape.sh --detail   and what each counts (the long files and functions, the
#                               references across layers, the coven_meta writers)
#
# - Device members: declarations at the top level of `class Device` and every
#   `extension Device` (functions, properties, initializers, subscripts), and how many public.
# - files over 600 lines, functions over 80 lines (from `func`/`init` to its closing brace).
# - references up: identifiers in Core, Crypto, Storage and Store that name a type declared in
#   a feature folder (Open, Writes, Sync, Read, Upload, Files, GC, Fsck, Members, Snapshot, DeviceOnly,
#   Moves, Status, Trash; Keys counts as below them); and in Crypto, any type declared outside Core and Crypto.
# - coven_meta: the files that write a setting, the distinct keys (or key families, `name:`
#   prefixes) they write, and how many of those are not settings (journals, flags).
# - ways into the outbox: files that write coven_outbox.
#
# It needs python3 and reads Sources/CovenKit only. Heuristic (it strips comments and string
# literals, then matches braces), exact enough to follow a trend.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys
from collections import defaultdict

ROOT = "Sources/CovenKit"
LOWER = ["Core", "Crypto", "Storage", "Store", "Keys"]
FEATURES = ["Open", "Writes", "Sync", "Read", "Upload", "Files", "GC", "Fsck", "Members", "Snapshot", "DeviceOnly", "Moves", "Status", "Trash"]
detail = "--detail" in sys.argv[1:]

def strip(text):
    """The source with comments and string literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('"""', i):
            j = text.find('"""', i + 3)
            j = n if j < 0 else j + 3
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            depth = 0
            while j < n:
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "(":
                    depth += 1; j += 2; continue
                if text[j] == "\\":
                    j += 2; continue
                if depth and text[j] == ")":
                    depth -= 1
                elif not depth and text[j] in '"\n':
                    break
                j += 1
            out.append('""')
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)

files = {}
for folder, _, names in os.walk(ROOT):
    for name in names:
        if name.endswith(".swift"):
            path = os.path.join(folder, name)
            raw = open(path, encoding="utf-8").read()
            files[path] = (raw, strip(raw))

def layer(path):
    return path[len(ROOT) + 1:].split("/")[0]

# Types declared per folder.
declared = defaultdict(set)
decl = re.compile(r"^\s*(?:(?:public|internal|private|fileprivate|final|indirect|open)\s+)*(?:class|struct|enum|protocol|actor|typealias)\s+([A-Z]\w*)", re.M)
for path, (_, code) in files.items():
    for name in decl.findall(code):
        declared[layer(path)].add(name)
# Names the standard library and Foundation declare too: not a reference to a feature.
STANDARD = {"Result", "Error", "Data", "Date", "URL", "Set", "Array", "Dictionary", "Range", "Element", "Index", "Key", "Value"}
lower_types = set().union(*(declared[f] for f in LOWER)) | STANDARD
feature_types = set().union(*(declared[f] for f in FEATURES)) - lower_types
crypto_allowed = declared["Core"] | declared["Crypto"]
above_crypto = set().union(*(declared[f] for f in declared if f not in ("Core", "Crypto"))) - crypto_allowed - STANDARD

# Device members.
members, public_members, device_files = 0, 0, set()
member_decl = re.compile(r"^(\s*)((?:@\w+(?:\([^)]*\))?\s+)*)((?:(?:public|internal|private|fileprivate|static|class|final|override|mutating|nonisolated|convenience|required|lazy|weak|unowned)\s+)*)(func|var|let|init|subscript)\b")
for path, (_, code) in files.items():
    lines = code.split("\n")
    depth, inside = 0, None
    for line in lines:
        opened = re.match(r"^(?:(?:public|internal|final|open)\s+)*(?:class Device\b|extension Device\b)", line)
        if inside is None and opened and depth == 0:
            inside = 0
            device_files.add(path)
        elif inside is not None and depth == 1:
            m = member_decl.match(line)
            if m:
                members += 1
                if "public" in m.group(3) or "open" in m.group(3):
                    public_members += 1
        depth += line.count("{") - line.count("}")
        if inside is not None and depth == 0 and "}" in line:
            inside = None

# Long files and functions.
long_files = sorted(((len(raw.split("\n")) - 1, path) for path, (raw, _) in files.items() if len(raw.split("\n")) - 1 > 600), reverse=True)
long_functions = []
func_start = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|internal|private|fileprivate|static|class|final|override|mutating|nonisolated|convenience|required|@discardableResult)\s+)*(?:func\s+(\w+)|(init)\b)")
for path, (_, code) in files.items():
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        m = func_start.match(lines[i])
        if not m:
            i += 1
            continue
        name = m.group(1) or m.group(2)
        depth, j, started = 0, i, False
        while j < len(lines):
            depth += lines[j].count("{") - lines[j].count("}")
            if lines[j].count("{"):
                started = True
            if started and depth <= 0:
                break
            if not started and j > i and re.search(r"\)\s*$|->", lines[j]) is None and "{" not in lines[j] and lines[j].strip() == "":
                break
            j += 1
        if started and j - i + 1 > 80:
            long_functions.append((j - i + 1, f"{path}:{i + 1} {name}"))
        i += 1
long_functions.sort(reverse=True)

# References up.
ident = re.compile(r"\b([A-Z]\w*)\b")
refs_up, crypto_up = [], []
for path, (_, code) in files.items():
    folder = layer(path)
    if folder not in LOWER:
        continue
    names = set(ident.findall(code))
    for name in sorted(names & feature_types):
        refs_up.append(f"{path} -> {name}")
    if folder == "Crypto":
        for name in sorted(names & above_crypto):
            crypto_up.append(f"{path} -> {name}")

# coven_meta writers and keys.
meta_files, meta_keys = set(), set()
setter = re.compile(r"(?:setSetting|settings\.set|settings\.add|settings\.remove)\(\s*([^,)]*)")
for path, (raw, _) in files.items():
    for m in setter.finditer(raw):
        if path.endswith("DeviceSettings.swift") or "func setSetting" in raw[max(0, m.start() - 40):m.start()]:
            continue
        meta_files.add(path)
        key = m.group(1).strip()
        if key.startswith("_ key"):
            continue
        key = re.sub(r"^(?:Self|Device|StoreSync|HybridClock)\.", "", key)
        key = re.sub(r'^checkedKey\("(\w+:).*', r"checked:\1", key)
        key = re.sub(r'^"([a-z_]+:?).*', r"\1", key)
        key = re.split(r"[ (]", key)[0]
        meta_keys.add(key)

# Ways into the outbox.
outbox = sorted(path for path, (raw, _) in files.items() if re.search(r"INSERT (?:OR \w+ )?INTO coven_outbox", raw))

# Functions handed a keyring as a parameter: the goal is that only the formats (which seal and
# open themselves with the key source they are given) and a join (before its device exists) take
# one; every type over a device takes its device's keys.
keyring_params = sorted(f"{path}:{raw.count(chr(10), 0, m.start()) + 1}" for path, (raw, _) in files.items()
                        for m in re.finditer(r"func [^(\n]*\([^)]*\bkeys: Keyring", raw))

print(f"Device members: {members} ({public_members} public) over {len(device_files)} files   (goal <= 40)")
print(f"files over 600 lines: {len(long_files)}   (goal 0)")
print(f"functions over 80 lines: {len(long_functions)}   (goal 0)")
print(f"references from Core, Crypto, Storage, Store to feature types: {len(refs_up)}   (goal 0)")
print(f"references from Crypto to types above it: {len(crypto_up)}   (goal 0)")
# What coven_meta may hold: the device's settings (its ids, storage, manifest, member, cache
# budget, upload pause and network) and its own single values (the clock's last stamp, the
# views' digest, when the cache and gc last swept). A key family (`name:`) or anything else is
# a journal or a flag, which belongs in its owner's table (schema step 22).
SETTINGS = {"store_id", "device_id", "device_name", "storage", "manifest", "created_at", "format", "store_key_check",
            "storeKeyCheckSetting", "memberSetting", "member_id", "cache_budget", "uploads_paused", "unmetered_only",
            "network_metered", "hlc", "views_sha", "views_sha256", "cache_swept_at", "leftoversSetting", "key"}
not_settings = sorted(k for k in meta_keys if k not in SETTINGS)
print(f"coven_meta: {len(meta_keys)} keys written from {len(meta_files)} files; journals or flags among them: {len(not_settings)}   (goal: settings only, 0)")
print(f"ways into the outbox: {len(outbox)}   (goal 1)")
print(f"functions handed a keyring: {len(keyring_params)}   (formats and the join only)")
if detail:
    print("\n# files over 600 lines"); [print(f"  {n} {p}") for n, p in long_files]
    print("\n# functions over 80 lines"); [print(f"  {n} {p}") for n, p in long_functions]
    print("\n# references up"); [print("  " + r) for r in refs_up]
    print("\n# Crypto's references up"); [print("  " + r) for r in crypto_up]
    print("\n# coven_meta writers"); [print("  " + p) for p in sorted(meta_files)]
    print("  keys: " + ", ".join(sorted(meta_keys)))
    print("  journals or flags: " + (", ".join(not_settings) or "none"))
    print("\n# writers of coven_outbox"); [print("  " + p) for p in outbox]
    print("\n# functions handed a keyring"); [print("  " + p) for p in keyring_params]
PY
