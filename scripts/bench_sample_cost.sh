#!/usr/bin/env bash
# Instructions one allocation sample costs, all threads included, under callgrind. Prints
# figures; not a test.
#
# bench/alloc_loop runs twice at the same length, at the default rate (512 KiB) and at a
# high one (32 KiB), with CPU sampling off and rings large enough that nothing is dropped.
# The difference of the two runs' instructions over the difference of their sample counts
# (read back with `d9 summary`) is the cost of one sample: its share of the host's sampled
# path, the stack walk, the writer's encoding and the seal's compression. The high-rate run
# is then split by function (callgrind_annotate, inclusive), per sample.
#
# Usage: scripts/bench_sample_cost.sh [N]     (N: alloc_loop operations, default 2000000)
# Environment: BUILD_DIR (default <repo>/build, built already).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
N=${1:-2000000}
LOW=524288
HIGH=32768
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
command -v valgrind >/dev/null || { echo "valgrind is missing" >&2; exit 1; }

echo "# command: ${0#"$ROOT"/} $N  (BUILD_DIR=$BUILD_DIR)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC'), d9 $(git -C "$ROOT" describe --always --dirty)"

declare -A IR SAMPLES
for rate in $LOW $HIGH; do
  IR[$rate]=$(env -i LD_PRELOAD="$BUILD_DIR/libd9.so" D9_OUTPUT="$OUT/t$rate" D9_CPU_HZ=0 \
    D9_SAMPLE_RATE=$rate D9_RING_SLOTS=262144 D9_SEED=7 \
    valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$rate" \
    "$BUILD_DIR/bench/alloc_loop" "$N" 2>&1 >/dev/null |
    sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d ,)
  summary=$("$BUILD_DIR/d9" summary "$OUT/t$rate")
  SAMPLES[$rate]=$(sed -n 's/^allocation samples: \([0-9]*\).*/\1/p' <<<"$summary")
  dropped=$(grep '^dropped' <<<"$summary")
  echo "rate $rate: ${IR[$rate]} Ir, ${SAMPLES[$rate]} samples ($dropped)"
done
echo "Ir per sample: $(((IR[$HIGH] - IR[$LOW]) / (SAMPLES[$HIGH] - SAMPLES[$LOW])))"

# Per sample at the high rate, by function (inclusive): where the cost goes.
echo "at $HIGH, per sample (inclusive):"
callgrind_annotate --inclusive=yes --threshold=100 "$OUT/cg.$HIGH" 2>/dev/null | grep -v '=>' |
  awk -v s="${SAMPLES[$HIGH]}" '
    function show(label, pat) {
      for (i = 1; i <= n; ++i) if (index(name[i], pat)) { printf "  %7.0f  %s\n", ir[i] / s, label; return }
    }
    /^ *[0-9,]+ / { v = $1; gsub(",", "", v); ++n; ir[n] = v; name[n] = $0 }
    END {
      show("host: malloc at a sample point (d9_malloc_sampled)", ":d9_malloc_sampled ")
      show("  of which recording it (record_alloc)", "d9::alloc::record_alloc(")
      show("    of which the stack walk (stack::capture)", "d9::stack::capture(")
      show("host: free of a sampled block (d9_free_sampled)", ":d9_free_sampled ")
      show("writer thread, all (writer_main)", "writer_main(")
      show("  drain: order, pair, encode (Collector::drain)", "d9::alloc::Collector::drain(")
      show("  seal: compression (Segment::compress)", "d9::Segment::compress")
    }'
