#!/usr/bin/env bash
# The CPU-sampling stress for minutes (CI runs a few seconds of it: E2ECpu.StressAt999Hz).
# At D9_CPU_HZ=999, tests/programs/cpu_stress dlopens/dlcloses in a loop, forks without
# exec, creates and joins short-lived threads, allocates heavily and checks that the
# host's own signals (SIGUSR1, SIGALRM, SIGPROF sent with kill) all arrive and that its
# own profiling timer takes over at the end. Its watchdog exits 3 on a deadlock. Then
# every process's segments are decoded.
#
# Usage: scripts/cpu_stress.sh [seconds per run] [runs]   (default 300 s, 1 run)
# Environment: BUILD_DIR (default <repo>/build), THREADS (short-lived threads per run,
# default 2000 per 3 s of run time).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SECONDS_PER_RUN=${1:-300}
RUNS=${2:-1}
THREADS=${THREADS:-$((SECONDS_PER_RUN * 2000 / 3))}

make -C "$BUILD_DIR" -j2 d9 d9_cli cpu_stress >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

for ((run = 1; run <= RUNS; run++)); do
  dir=$OUT/run$run
  echo "== run $run: ${SECONDS_PER_RUN}s at 999 Hz, $THREADS short-lived threads"
  status=0
  D9_OUTPUT=$dir D9_CPU_HZ=999 LD_PRELOAD=$BUILD_DIR/libd9.so \
    "$BUILD_DIR/tests/programs/cpu_stress" "$SECONDS_PER_RUN" "$THREADS" >"$OUT/out" 2>"$OUT/err" ||
    status=$?
  cat "$OUT/out"
  if [[ $status -ne 0 ]]; then
    echo "FAILED: exit status $status"
    cat "$OUT/err"
    exit 1
  fi
  if grep -v -e '^d9: D9_CPU_HZ=999 is above the kernel tick' \
    -e "^d9: the program started its own profiling timer" "$OUT/err"; then
    echo "FAILED: unexpected stderr (above)"
    exit 1
  fi
  active=$(find "$dir" -name '*.active' | wc -l)
  procs=$(find "$dir" -mindepth 1 -maxdepth 1 -type d | wc -l)
  if [[ $active -ne 0 ]]; then
    echo "FAILED: $active unsealed segments"
    exit 1
  fi
  "$BUILD_DIR/d9" summary "$dir" | sed -n '1,2p;/CPU samples/p'
  echo "   $procs processes, every segment sealed and decoded"
done
echo "== cpu stress passed"
