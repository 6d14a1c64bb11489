#!/usr/bin/env bash
# Retakes the README's screenshots (resources/screenshots/) from the bundled demo, as a new user
# sees the window on a laptop's 1366×768: the tree with a tensor's details, the load diff of the
# negative control, its verification, a comparison with a copy torch changed, a shard map and a
# layer plot; and the first two again on a 1920×1080 screen (resources/screenshots/1920x1080/).
#   tools/take_screenshots.sh [BUILD]      # BUILD defaults to build/
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${SHARDSCOPE_PYTHON:-.venv/bin/python}
APP=$BUILD/app/gui/shardscope
DEMO=resources/demo/dsv3-mini
OUT=resources/screenshots
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The main window shows the problems panel too: a copy with one data file cut 3000 bytes short.
cp -r "$DEMO" "$TMP/demo-cut"
data=$(find "$TMP/demo-cut" -name '__1_0.distcp' | head -1)
truncate -s "-3000" "$data"
"$PY" tools/make_changed_copy.py "$DEMO" "$TMP/demo-changed" >/dev/null

SIZE=1366x768
shot() { # FILE ARGS…
    local file=$1
    shift
    mkdir -p "$(dirname "$OUT/$file")"
    xvfb-run -a -s "-screen 0 ${SIZE}x24" "$APP" --size "$SIZE" --screenshot "$OUT/$file" "$@"
    echo "$OUT/$file"
}
negative=(--config "$DEMO/config.json" --disable-rule mla_down_proj --no-strict
    --strictness ignore_all)
shot main-window.png -s model.module.embedding.word_embeddings.weight "$TMP/demo-cut"
shot diff-negative-control.png "${negative[@]}" --panel diff "$DEMO"
shot verify.png "${negative[@]}" --verify --dp 2 --panel verify "$DEMO"
shot compare.png --against "$TMP/demo-changed" --values --panel compare "$DEMO"
shot shard-map.png --config "$DEMO/config.json" --verify --dp 2 \
    -s model.module.embedding.word_embeddings.weight --panel shards "$DEMO"
shot layers.png -s model.module.decoder.layers.0.self_attention.linear_proj.weight \
    --plot-layers --panel layers "$DEMO"
SIZE=1920x1080
shot 1920x1080/main-window.png -s model.module.embedding.word_embeddings.weight "$TMP/demo-cut"
shot 1920x1080/diff-negative-control.png "${negative[@]}" --panel diff "$DEMO"
