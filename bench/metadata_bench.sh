#!/usr/bin/env bash
# Parse a DeepSeek-V3-scale DCP .metadata (written by torch's own classes and pickling) with
# ShardScope and with torch's FileSystemReader.read_metadata(), in one run, and print the ratio.
#   bench/metadata_bench.sh [DIR] [TORCH_REPEATS]
# DIR defaults to build/bench-data/dsv3 and is generated on first use (about 2 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/bench-data/dsv3}
REPEATS=${2:-1}
PY=${SHARDSCOPE_PYTHON:-.venv/bin/python}
[ -f "$DIR/.metadata" ] || "$PY" bench/make_dsv3_metadata.py --out "$DIR"
cat "$DIR/.metadata" >/dev/null # page cache warm for both readers
ours=$(build/bench/bench_open_metadata "$DIR" 3)
theirs=$("$PY" bench/bench_torch_read_metadata.py "$DIR" "$REPEATS")
"$PY" - "$ours" "$theirs" <<'PY'
import json, sys
ours, torch = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert ours["chunks"] == torch["chunks"], (ours["chunks"], torch["chunks"])
print(json.dumps({"shardscope": ours, "torch": torch,
                  "speedup": round(torch["seconds"] / ours["seconds"], 1),
                  "memory_ratio": round(ours["peak_rss_mb"] / torch["peak_rss_mb"], 2)}, indent=1))
PY
