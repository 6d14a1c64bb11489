#!/usr/bin/env bash
# diff --against --values against torch (bench/bench_values_torch.py: dcp.load of both, then the
# same figures in float64 per tensor), on the same two checkpoints with a warm page cache, in one
# run. Wall time and peak RSS of each (/usr/bin/time).
#   bench/values_bench.sh [DIR] [GIB] [MAX_MEMORY_BYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/bench-data/values}
gib=${2:-2}
budget=${3:-536870912}
py=${SHARDSCOPE_PYTHON:-.venv/bin/python}
cli=build/app/cli/shardscope-cli
if [[ ! -d $dir/a ]]; then
  "$py" bench/make_value_pair.py "$dir" --gib "$gib"
fi
cat "$dir"/a/* "$dir"/b/* > /dev/null   # warm the page cache for both
measure() { /usr/bin/time -f '%e s, %M KiB peak' "$@" 2>&1 >/dev/null | tail -1; }
echo "shardscope: $(measure "$cli" diff "$dir/a" --against "$dir/b" --values --max-memory "$budget")"
echo "torch:      $(measure "$py" bench/bench_values_torch.py "$dir/a" "$dir/b")"
echo "shardscope: $(measure "$cli" diff "$dir/a" --against "$dir/b" --values --max-memory "$budget")"
echo "torch:      $(measure "$py" bench/bench_values_torch.py "$dir/a" "$dir/b")"
