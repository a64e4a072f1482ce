#!/usr/bin/env bash
# Throughput of `d9 summary` and `d9 alloc` in MB/s of decompressed trace per core.
#
#   bash scripts/cli_bench.sh [ROUNDS]
#
# Generates a large trace once (known_sites at D9_SAMPLE_RATE=1, every allocation and free
# recorded: ~7 M events, ~165 MB raw) under $D9_BENCH_DIR (default /tmp/d9-cli-bench),
# keeps zstd and gzip copies of it, then times each command on each container ROUNDS times
# (default 3) and prints the best run. d9 is single-threaded, so MB/s of CPU time (user +
# sys) is the per-core figure; the goal is >= 150 MB/s. Environment: BUILD_DIR (default
# build), D9_BENCH_ROUNDS_OF_WORK (known_sites rounds, default 400000).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bench=${D9_BENCH_DIR:-/tmp/d9-cli-bench}
work=${D9_BENCH_ROUNDS_OF_WORK:-400000}
# shellcheck source=scripts/need_build.sh
. scripts/need_build.sh known_sites

if [ ! -d "$bench/raw" ] || [ -z "$(find "$bench/raw" -name 'trace.*' -print -quit)" ]; then
  echo "== generating the trace: known_sites counted $work at D9_SAMPLE_RATE=1"
  rm -rf "$bench"
  mkdir -p "$bench"
  D9_OUTPUT="$bench/raw" D9_SAMPLE_RATE=1 D9_RING_SLOTS=1048576 D9_COMPRESS=none \
    LD_PRELOAD="$PWD/$build/libd9.so" "$build/tests/programs/known_sites" counted "$work" >/dev/null
  # Compressed copies, segment by segment (the format is told by magic bytes, not names).
  for kind in zstd gzip; do
    (cd "$bench/raw" && find . -type f -name 'trace.*' | while read -r f; do
      mkdir -p "$bench/$kind/$(dirname "$f")"
      case $kind in
        zstd) if command -v zstd >/dev/null; then zstd -q -3 -c "$f" >"$bench/$kind/$f.zst"; fi ;;
        gzip) gzip -6 -c "$f" >"$bench/$kind/$f.gz" ;;
      esac
    done)
  done
fi

decoded=$("$d9" summary --json --no-progress "$bench/raw" | sed -n 's/.*"bytes_decoded":\([0-9]*\).*/\1/p')
events=$("$d9" summary --json --no-progress "$bench/raw" |
  sed -n 's/.*"alloc":{[^}]*"samples":\([0-9]*\).*"frees":\([0-9]*\).*/\1 \2/p' | awk '{print $1 + $2}')
echo "trace: $(awk -v b="$decoded" 'BEGIN { printf "%.1f", b / 1e6 }') MB decompressed, ${events} alloc+free events, $(find "$bench/raw" -type f | wc -l) segment(s)"
printf '%-8s %-6s %10s %10s %12s %12s\n' command input "wall s" "cpu s" "MB/s wall" "MB/s/core"

TIMEFORMAT='%R %U %S'
for cmd in summary alloc; do
  for kind in raw zstd gzip; do
    [ -n "$(find "$bench/$kind" -type f -print -quit 2>/dev/null)" ] || continue
    best_wall=999999 best_cpu=999999
    for _ in $(seq "$rounds"); do
      t=$({ time "$d9" "$cmd" --no-progress "$bench/$kind" >/dev/null; } 2>&1 | tail -1)
      read -r wall user sys <<<"$t"
      cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
      best_wall=$(awk -v a="$best_wall" -v b="$wall" 'BEGIN { print (b < a) ? b : a }')
      best_cpu=$(awk -v a="$best_cpu" -v b="$cpu" 'BEGIN { print (b < a) ? b : a }')
    done
    awk -v c="$cmd" -v k="$kind" -v w="$best_wall" -v u="$best_cpu" -v b="$decoded" 'BEGIN {
      printf "%-8s %-6s %10.3f %10.3f %12.0f %12.0f\n", c, k, w, u, b / 1e6 / w, b / 1e6 / u }'
  done
done
