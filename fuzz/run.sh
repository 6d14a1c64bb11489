#!/usr/bin/env bash
# Builds the fuzz harnesses (clang, ASan + UBSan, libFuzzer) in build-fuzz/ and runs them.
#   fuzz/run.sh BUILD PYTHON [TIME] [HARNESS...]   each harness for TIME (60s, 10m, 1h)
#   fuzz/run.sh BUILD PYTHON --ci                  seeds and regressions, then 15 s each
# `./dev fuzz` calls this after building BUILD (the seeds come from its test fixtures and its
# shardscope-cli writes the seed layouts). Exits 1 when any harness found a crash, a leak, a
# hang or undefined behaviour; its input is in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$1
PYTHON=$2
shift 2
OUT=$ROOT/build-fuzz
ALL=(pickle dcp zip torchsave safetensors safetensors_index megatron layout config report indexcache)

ci=0
time=60
if [ "${1:-}" = --ci ]; then
    ci=1
    time=15
    shift
elif [[ "${1:-}" =~ ^[0-9]+[smh]?$ ]]; then
    time=$1
    shift
fi
case "$time" in
*m) time=$((${time%m} * 60)) ;;
*h) time=$((${time%h} * 3600)) ;;
*s) time=${time%s} ;;
esac
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && harnesses=("${ALL[@]}")

log() { printf '\033[1m[fuzz]\033[0m %s\n' "$*" >&2; }

# Seeds: the files real torch wrote for the tests.
if [ ! -d "$BUILD/fixtures/bad" ] || [ ! -d "$BUILD/layout-fixtures" ] || [ ! -d "$BUILD/pickles" ]; then
    log "writing the test fixtures (the seeds come from them)"
    (cd "$BUILD" && ctest -R '^fixtures\.' --output-on-failure >/dev/null)
fi
if [ ! -d "$OUT/seeds" ]; then
    "$PYTHON" tools/make_fuzz_seeds.py --build "$BUILD" --out "$OUT/seeds" \
        --cli "$BUILD/app/cli/shardscope-cli" >/dev/null
fi

# SHARDSCOPE_LAUNCHER: the compiler launcher flags ./dev passes (ccache).
launcher=${SHARDSCOPE_LAUNCHER:-}
if [ ! -f "$OUT/build.ninja" ] || [ "$(cat "$OUT/.dev-config" 2>/dev/null)" != "$launcher" ]; then
    log "configuring $OUT (clang, ASan + UBSan, libFuzzer)"
    # shellcheck disable=SC2086 # the launcher flags are words
    cmake -S fuzz -B "$OUT" -G Ninja -DCMAKE_CXX_COMPILER=clang++ $launcher >/dev/null
    echo "$launcher" >"$OUT/.dev-config"
fi
log "building the harnesses"
if ! cmake --build "$OUT" -j"$(nproc)" >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log" >&2
    exit 2
fi

dictOf() {
    case $1 in
    pickle | dcp) cat fuzz/dict/pickle.dict ;;
    zip) cat fuzz/dict/zip.dict ;;
    torchsave) cat fuzz/dict/pickle.dict fuzz/dict/zip.dict ;;
    megatron) cat fuzz/dict/json.dict fuzz/dict/pickle.dict fuzz/dict/zip.dict ;;
    indexcache) cat fuzz/dict/indexcache.dict ;;
    *) cat fuzz/dict/json.dict ;;
    esac
}

mkdir -p "$OUT/artifacts" "$OUT/dict" "$OUT/logs"
summary=$OUT/summary.md
{
    echo "| harness | seconds | executions | exec/s | coverage (edges) | features | corpus | peak RSS | found |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$summary"
# One harness: its summary row in $OUT/rows/HARNESS, its status in $OUT/rows/HARNESS.failed.
runHarness() {
    local h=$1 bin=$OUT/${1}_fuzzer corpus=$OUT/corpus/$1 rc line cov ft corp runs eps rss found
    local before after
    mkdir -p "$corpus" "$OUT/seeds/$h" "fuzz/regressions/$h" "$OUT/artifacts/$h"
    dictOf "$h" >"$OUT/dict/$h.dict"
    log "$h: ${time}s"
    before=$(ls "$OUT/artifacts/$h" | wc -l)
    # The scratch files each harness writes stay in /dev/shm; -rss_limit_mb bounds what any
    # input may make the readers allocate (their own limits are far below it).
    set +e
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" -max_total_time="$time" -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
        -dict="$OUT/dict/$h.dict" -artifact_prefix="$OUT/artifacts/$h/" -print_final_stats=1 \
        "$corpus" "$OUT/seeds/$h" "fuzz/regressions/$h" >"$OUT/logs/$h.log" 2>&1
    rc=$?
    set -e
    after=$(ls "$OUT/artifacts/$h" | wc -l)
    line=$(grep -aE '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$OUT/logs/$h.log" | tail -1 || true)
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
    corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$line")
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$OUT/logs/$h.log")
    eps=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$OUT/logs/$h.log")
    rss=$(sed -nE 's/^stat::peak_rss_mb: *([0-9]+)/\1/p' "$OUT/logs/$h.log")
    found=nothing
    if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
        found="**exit $rc; see build-fuzz/logs/$h.log**"
        touch "$OUT/rows/$h.failed"
        grep -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' \
            "$OUT/logs/$h.log" | head -5 >&2 || true
    fi
    echo "| $h | $time | ${runs:-?} | ${eps:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | ${rss:-?} MB | $found |" >"$OUT/rows/$h"
}

# One harness per core at a time: each still runs its seeds, its regressions and its full time.
rm -rf "$OUT/rows"
mkdir -p "$OUT/rows"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT # no harness outlives an interrupted run
for h in "${harnesses[@]}"; do
    [ -x "$OUT/${h}_fuzzer" ] || { log "no harness $h"; exit 2; }
done
for h in "${harnesses[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
    runHarness "$h" &
done
wait
failed=0
for h in "${harnesses[@]}"; do
    if [ ! -f "$OUT/rows/$h" ]; then # its run itself failed before it could say anything
        echo "| $h | $time | ? | ? | ? | ? | ? | ? | **no result; see build-fuzz/logs/$h.log** |" >>"$summary"
        failed=1
        continue
    fi
    cat "$OUT/rows/$h" >>"$summary"
    [ -e "$OUT/rows/$h.failed" ] && failed=1
done
cat "$summary"
if [ "$failed" -ne 0 ]; then
    log "a harness failed: its input is in $OUT/artifacts/HARNESS/ (keep it in fuzz/regressions/HARNESS/)"
    exit 1
fi
[ "$ci" -eq 1 ] && log "every harness ran its seeds and regressions and fuzzed ${time}s each"
exit 0
