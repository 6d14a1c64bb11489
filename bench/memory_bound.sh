#!/usr/bin/env bash
# verify --max-memory against the process's peak RSS, on the verify benchmark's checkpoint:
# how far over "the process at rest + the budget" the whole process goes (SECURITY.md states
# the bound). Peak RSS through tests/faults/peakrss (the CLI's own figure, not its parent's).
#   bench/memory_bound.sh [DIR]    # DIR defaults to build/bench-data/verify
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/bench-data/verify}
PY=${SHARDSCOPE_PYTHON:-.venv/bin/python}
CLI=build/app/cli/shardscope-cli
PEAK=build/tests/cli/shardscope_peakrss
[ -f "$DIR/ckpt/.metadata" ] || "$PY" bench/make_verify_checkpoint.py --out "$DIR"
[ -f "$DIR/layout.json" ] || "$CLI" layout --from-config "$DIR/config.json" --dp 2 -o "$DIR/layout.json" 2>/dev/null
rss() { # KiB of the command's peak RSS
    local out
    out=$(mktemp)
    PEAKRSS_OUT=$out "$PEAK" "$@" >/dev/null 2>&1 || true
    cut -d' ' -f1 "$out"
    rm -f "$out"
}
rest=$(rss "$CLI" rules)
printf '| --max-memory | threads | peak RSS | over rest + budget |\n|---|---|---|---|\n'
for mib in 64 256 1024; do
    for threads in 1 2; do
        peak=$(rss "$CLI" verify "$DIR/ckpt" --layout "$DIR/layout.json" --quiet \
            --max-memory $((mib << 20)) --threads "$threads")
        printf '| %s MiB | %s | %s MiB | %+d MiB |\n' "$mib" "$threads" $((peak / 1024)) \
            $(((peak - rest) / 1024 - mib))
    done
done
echo "process at rest (shardscope-cli rules): $((rest / 1024)) MiB"
