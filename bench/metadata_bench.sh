#!/usr/bin/env bash
# Open a DeepSeek-V3-scale DCP .metadata (written by torch's own classes and pickling) with
# ShardScope, decoded and through the persistent index, and with torch's
# FileSystemReader.read_metadata(), in one run, and print the ratios.
#   bench/metadata_bench.sh [DIR] [TORCH_REPEATS] [RANKS]
# DIR defaults to build/bench-data/dsv3 and is generated on first use (about 2 minutes) for
# RANKS data-parallel ranks (256: 1.75 M chunks; 512: twice the chunks).
#
# Each figure of ours is a fresh process (`bench_open_metadata DIR 1`), best of three:
#   decoded       the persistent index off (SHARDSCOPE_NO_CACHE=1): the pickle decoded
#   first_open    an empty cache: decoded, then the entry encoded (written after it returns)
#                 (the cache is emptied before each of the three)
#   cached        the entry read back
# plus `cached_in_process`: the best of three opens in one process (the window's reopen).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/bench-data/dsv3}
REPEATS=${2:-1}
RANKS=${3:-256}
PY=${SHARDSCOPE_PYTHON:-.venv/bin/python}
[ -f "$DIR/.metadata" ] || "$PY" bench/make_dsv3_metadata.py --out "$DIR" --ranks "$RANKS"
cat "$DIR/.metadata" >/dev/null # page cache warm for both readers
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT
export SHARDSCOPE_CACHE_DIR=$CACHE
best() { # the run with the fewest seconds of three
    for _ in 1 2 3; do "$@"; done |
        "$PY" -c 'import json,sys; print(json.dumps(min((json.loads(l) for l in sys.stdin), key=lambda j: j["seconds"])))'
}
decoded=$(SHARDSCOPE_NO_CACHE=1 best build/bench/bench_open_metadata "$DIR" 1)
first=$(best sh -c 'rm -rf "$SHARDSCOPE_CACHE_DIR"/*; exec build/bench/bench_open_metadata "$0" 1' "$DIR")
cached=$(best build/bench/bench_open_metadata "$DIR" 1)
inproc=$(build/bench/bench_open_metadata "$DIR" 3)
entry=$(du -b "$CACHE"/*.ssidx | cut -f1)
theirs=$("$PY" bench/bench_torch_read_metadata.py "$DIR" "$REPEATS")
"$PY" - "$decoded" "$first" "$cached" "$inproc" "$theirs" "$entry" <<'PY'
import json, sys
decoded, first, cached, inproc, torch = (json.loads(a) for a in sys.argv[1:6])
for ours in (decoded, first, cached, inproc):
    assert ours["chunks"] == torch["chunks"], (ours["chunks"], torch["chunks"])
t = torch["seconds"]
print(json.dumps({
    "decoded": decoded, "first_open": first, "cached": cached, "cached_in_process": inproc,
    "torch": torch, "entry_mb": round(int(sys.argv[6]) / 2**20, 1),
    "speedup": {"decoded": round(t / decoded["seconds"], 1),
                "first_open": round(t / first["seconds"], 1),
                "cached": round(t / cached["seconds"], 1),
                "cached_in_process": round(t / inproc["seconds"], 1)},
    "memory_ratio": {"decoded": round(decoded["peak_rss_mb"] / torch["peak_rss_mb"], 2),
                     "first_open": round(first["peak_rss_mb"] / torch["peak_rss_mb"], 2),
                     "cached": round(cached["peak_rss_mb"] / torch["peak_rss_mb"], 2)},
}, indent=1))
PY
