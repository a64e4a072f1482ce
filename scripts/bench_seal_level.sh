#!/usr/bin/env bash
# Compression ratio against speed of the zstd level libd9 seals segments with. Prints
# figures; not a test. Each workload writes an uncompressed segment (D9_COMPRESS=none);
# zstd's own benchmark mode (`zstd -b`, best of its runs) then compresses that segment at
# every level, so every level sees the same bytes.
#
# With valgrind installed, a second table gives zstd's instructions per input byte at each
# level (callgrind, the whole `zstd -c` run), steadier than MB/s on a shared machine.
#
# Usage: scripts/bench_seal_level.sh        (BUILD_DIR, default <repo>/build, built already)
# Workloads: bench/alloc_loop (allocation samples at 32 KiB and the default 512 KiB, the
# live set on) and bench/cpu_loop (CPU samples at 999 Hz).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
LEVELS=(-5 -3 -1 1 2 3)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
command -v zstd >/dev/null || { echo "zstd(1) is missing (apt-get install zstd)" >&2; exit 1; }

echo "# command: ${0#"$ROOT"/}  (BUILD_DIR=$BUILD_DIR)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(zstd -V | head -1)"

# segment NAME ENV... -- PROG ARGS: runs PROG under libd9 and leaves $OUT/NAME.bin.
segment() {
  local name=$1 dir=$OUT/$1
  shift
  local -a envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env -i LD_PRELOAD="$BUILD_DIR/libd9.so" D9_OUTPUT="$dir" D9_COMPRESS=none "${envs[@]}" \
    "$@" >/dev/null
  cat "$dir"/*/trace.*.bin >"$OUT/$name.bin"
}

segment alloc_32k D9_SAMPLE_RATE=32768 D9_CPU_HZ=0 -- "$BUILD_DIR/bench/alloc_loop" 4000000
segment alloc_512k D9_CPU_HZ=0 -- "$BUILD_DIR/bench/alloc_loop" 40000000
segment cpu_999hz D9_CPU_HZ=999 -- "$BUILD_DIR/bench/cpu_loop" 300000000

printf '%-12s %10s' workload raw
for l in "${LEVELS[@]}"; do printf ' %16s' "level $l"; done
printf '\n%-12s %10s' "" bytes
for l in "${LEVELS[@]}"; do printf ' %16s' "ratio  MB/s"; done
echo
for name in alloc_32k alloc_512k cpu_999hz; do
  f=$OUT/$name.bin
  printf '%-12s %10d' "$name" "$(stat -c %s "$f")"
  for l in "${LEVELS[@]}"; do
    if ((l < 0)); then flag=--fast=$((-l)); else flag=-b$l; fi
    [[ $flag == --fast=* ]] && flag="-b $flag"
    # zstd -b prints "<name> : <in> -> <out> (x<ratio>), <c MB/s>, <d MB/s>" (last line).
    line=$(zstd $flag -i3 "$f" 2>&1 | tr '\r' '\n' | grep ' -> ' | tail -1)
    ratio=$(sed -n 's/.*(x\([0-9.]*\)).*/\1/p' <<<"$line")
    speed=$(sed -n 's/.*), *\([0-9.]*\) MB\/s.*/\1/p' <<<"$line")
    printf ' %7s %8s' "$ratio" "$speed"
  done
  echo
done

command -v valgrind >/dev/null || exit 0
echo
printf '%-12s' "Ir per byte"
for l in "${LEVELS[@]}"; do printf ' %8s' "$l"; done
echo
for name in alloc_32k alloc_512k cpu_999hz; do
  f=$OUT/$name.bin
  printf '%-12s' "$name"
  for l in "${LEVELS[@]}"; do
    if ((l < 0)); then flag=--fast=$((-l)); else flag=-$l; fi
    ir=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null zstd "$flag" -q -c "$f" 2>&1 \
      >/dev/null | sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d ,)
    printf ' %8.1f' "$(bc -l <<<"$ir / $(stat -c %s "$f")")"
  done
  echo
done
