#!/usr/bin/env bash
# Verification throughput against (a) a raw sequential read of the same files (warm page cache)
# and (b) torch's dcp.load plus a SHA-256 per tensor in Python, in one run.
#   bench/verify_bench.sh [DIR]    # DIR defaults to build/bench-data/verify (made on first use)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/bench-data/verify}
PY=${SHARDSCOPE_PYTHON:-.venv/bin/python}
CLI=build/app/cli/shardscope-cli
[ -f "$DIR/ckpt/.metadata" ] || "$PY" bench/make_verify_checkpoint.py --out "$DIR"
"$CLI" layout --from-config "$DIR/config.json" --dp 2 -o "$DIR/layout.json" 2>/dev/null
bytes=$(cat "$DIR"/ckpt/*.distcp | wc -c)
cat "$DIR"/ckpt/*.distcp >/dev/null # warm
t0=$(date +%s.%N); cat "$DIR"/ckpt/*.distcp >/dev/null; t1=$(date +%s.%N)
raw=$(echo "$t1 - $t0" | bc -l)
t0=$(date +%s.%N); "$CLI" verify "$DIR/ckpt" --layout "$DIR/layout.json" --quiet >/dev/null; t1=$(date +%s.%N)
ours=$(echo "$t1 - $t0" | bc -l)
torch=$("$PY" bench/bench_torch_load_hash.py "$DIR/ckpt")
"$PY" - "$bytes" "$raw" "$ours" "$torch" <<'PY'
import json, sys
b, raw, ours = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
torch = json.loads(sys.argv[4])
gb = lambda s: round(b / s / 1e9, 2)
print(json.dumps({"bytes": b, "raw_read_s": round(raw, 2), "verify_s": round(ours, 2),
                  "torch_load_hash_s": round(torch["seconds"], 2),
                  "GB_per_s": {"raw": gb(raw), "verify": gb(ours), "torch": gb(torch["seconds"])},
                  "verify_vs_raw": round(raw / ours, 2),
                  "verify_vs_torch": round(torch["seconds"] / ours, 2)}, indent=1))
PY
