#!/usr/bin/env bash
# This build against an earlier commit's, on the same files, in one run: the runs alternate
# (previous, current, previous, …) so that this VM's drift falls on both alike. For a change
# that must not cost speed (a restructuring): the ratios should sit at 1 within the noise.
#   bench/ab_previous.sh [REV] [ROUNDS]     # REV defaults to HEAD~1, ROUNDS to 5
#   AB_GUI=1 bench/ab_previous.sh [REV] [ROUNDS]   # the window's bench_gui as well
# Builds REV's benchmarks and CLI in build-prev/ (a git worktree in .cache/prev), makes the
# DeepSeek-V3-scale metadata and the verify checkpoint on first use (bench/README.md). With
# AB_GUI=1 build-prev/ has the GUI too, and each round adds the window's open to paint, filter,
# diff view and rule toggle (bench_gui on the offscreen platform, each side's index cache warm).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
REV=${1:-HEAD~1}
ROUNDS=${2:-5}
PY=${SHARDSCOPE_PYTHON:-$ROOT/.venv/bin/python}
DSV3=build/bench-data/dsv3
VERIFY=build/bench-data/verify
TARGETS=(bench_open_metadata bench_diff shardscope-cli)
GUI=${AB_GUI:-0}
[ "$GUI" = 1 ] && TARGETS+=(bench_gui)

prev=$ROOT/.cache/prev
if [ ! -d "$prev" ]; then
    git worktree add --detach "$prev" "$REV" >/dev/null
else
    git -C "$prev" checkout -q --detach "$REV"
fi
prefix=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
launcher=""
command -v ccache >/dev/null && launcher=ccache
CCACHE_BASEDIR=$prev CCACHE_NOHASHDIR=1 \
cmake -S "$prev" -B build-prev -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DCMAKE_C_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_PREFIX_PATH="$prefix" -DSHARDSCOPE_BUILD_GUI="$([ "$GUI" = 1 ] && echo ON || echo OFF)" \
    -DSHARDSCOPE_BUILD_TESTS=OFF \
    -DSHARDSCOPE_PYTHON="$PY" >/dev/null
CCACHE_BASEDIR=$prev CCACHE_NOHASHDIR=1 cmake --build build-prev --target "${TARGETS[@]}" >/dev/null
cmake --build build --target "${TARGETS[@]}" >/dev/null

[ -f "$DSV3/.metadata" ] || "$PY" bench/make_dsv3_metadata.py --out "$DSV3"
[ -f "$VERIFY/ckpt/.metadata" ] || "$PY" bench/make_verify_checkpoint.py --out "$VERIFY"
build/app/cli/shardscope-cli layout --from-config bench/deepseek_v3_config.json \
    -o build/bench-data/dsv3-layout.json 2>/dev/null
build/app/cli/shardscope-cli layout --from-config "$VERIFY/config.json" --dp 2 \
    -o "$VERIFY/layout.json" 2>/dev/null
cat "$DSV3/.metadata" "$VERIFY"/ckpt/*.distcp >/dev/null # page cache warm for both
if [ "$GUI" = 1 ]; then # the window's checkpoint: the same metadata beside sparse data files
    PY=$PY CLI=build/app/cli/shardscope-cli META=$DSV3 DIR=build/bench-data/dsv3-gui \
        LAYOUT=build/bench-data/dsv3-layout.json
    . bench/dsv3_data.sh
    for side in prev cur; do # each side's own persistent index, written here: every round warm
        b=build
        [ $side = prev ] && b=build-prev
        SHARDSCOPE_CACHE_DIR=$ROOT/.cache/ab-index-$side "$b/app/cli/shardscope-cli" inspect \
            build/bench-data/dsv3-gui >/dev/null
    done
fi

seconds() { # command…: wall seconds of one run
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
out=$(mktemp)
for ((i = 0; i < ROUNDS; i++)); do
    for side in prev cur; do
        b=build
        [ $side = prev ] && b=build-prev
        echo "$side open $("$b/bench/bench_open_metadata" "$DSV3" 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')" >>"$out"
        echo "$side diff $("$b/bench/bench_diff" "$DSV3" build/bench-data/dsv3-layout.json 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["diff_seconds"])')" >>"$out"
        echo "$side verify $(seconds "$b/app/cli/shardscope-cli" verify "$VERIFY/ckpt" --layout "$VERIFY/layout.json" --quiet)" >>"$out"
        if [ "$GUI" = 1 ]; then
            SHARDSCOPE_CACHE_DIR=$ROOT/.cache/ab-index-$side QT_QPA_PLATFORM=offscreen "$b/bench/bench_gui" \
                build/bench-data/dsv3-gui build/bench-data/dsv3-layout.json 2>/dev/null |
                "$PY" -c 'import json,sys; g=json.load(sys.stdin); [print(sys.argv[1], "gui_" + k, g[k]) for k in ("open_to_paint", "filter_worst", "diff_view", "rule_toggle")]' "$side" >>"$out"
        fi
    done
done
"$PY" - "$out" "$REV" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, what, s = line.split()
    runs.setdefault(what, {}).setdefault(side, []).append(float(s))
res = {"previous": sys.argv[2]}
for what, sides in runs.items():
    p, c = statistics.median(sides["prev"]), statistics.median(sides["cur"])
    res[what] = {"previous_median_s": round(p, 3), "current_median_s": round(c, 3),
                 "current_over_previous": round(c / p, 3),
                 "previous_runs": [round(x, 3) for x in sides["prev"]],
                 "current_runs": [round(x, 3) for x in sides["cur"]]}
print(json.dumps(res, indent=1))
PY
rm -f "$out"
