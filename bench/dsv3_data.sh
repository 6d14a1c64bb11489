# Sourced by the DeepSeek-V3-scale benchmarks (gui_bench.sh, fix_bench.sh), with PY, CLI, META,
# DIR and LAYOUT set: the metadata bench's .metadata (1.74 M chunks; made on first use) in DIR
# beside sparse stand-ins for its 256 data files, so that the integrity checks pass as on a real
# checkpoint (a few MiB of disk: the items the open's item check reads hold a torch.save
# archive's records, bench/make_dsv3_standins.py), and DeepSeek-V3's layout from
# bench/deepseek_v3_config.json.
[ -f "$META/.metadata" ] || "$PY" bench/make_dsv3_metadata.py --out "$META"
[ -f "$LAYOUT" ] || "$CLI" layout --from-config bench/deepseek_v3_config.json -o "$LAYOUT"
if [ ! -e "$DIR/.metadata" ]; then
  mkdir -p "$DIR"
  ln -sf "$(realpath "$META/.metadata")" "$DIR/.metadata"
  for i in $(seq 0 255); do truncate -s 64G "$DIR/__${i}_0.distcp"; done
fi
# Made once (its metadata read by torch: about a minute); .standins marks it done.
[ -e "$DIR/.standins" ] || { "$PY" bench/make_dsv3_standins.py "$DIR" && touch "$DIR/.standins"; }
