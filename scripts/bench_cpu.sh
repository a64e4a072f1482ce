#!/usr/bin/env bash
# CPU-sampling overhead of libd9 on a CPU-bound loop, next to gperftools' CPU profiler.
# Prints figures; not a test.
#
# Usage: scripts/bench_cpu.sh [rounds]     interleaved rounds (default 15)
#
# Configurations (run in a rotating order every round):
#   plain        no preload (reference only)
#   d9-0         LD_PRELOAD=libd9.so D9_CPU_HZ=0      (baseline of every ratio)
#   d9-99        LD_PRELOAD=libd9.so (default 99 Hz)  (target <= 1.01x)
#   d9-999       LD_PRELOAD=libd9.so D9_CPU_HZ=999    (target <= 1.03x; CPU-time timers
#                                                      fire at most once per kernel tick)
#   d9-99-seal   d9-99 with the seal's symbolization and compression (a fixed cost per
#                segment, about 80 ms of CPU here, not a cost per sample)
# The d9-0/99/999 runs set D9_SYMBOLIZE=0 D9_COMPRESS=none, so they measure sampling.
#   gperf-99     LD_PRELOAD=libprofiler.so CPUPROFILE=... CPUPROFILE_FREQUENCY=99
#   gperf-999    the same at 999
# Workload: bench/cpu_loop.c. Each ratio is taken against the same round's d9-0 run, and
# the median over rounds is printed, for wall time and for the process's CPU time
# (user + system, which includes signal delivery and the handlers; steadier than wall time
# on a shared machine), with the samples written per second of CPU.
#
# Environment: BUILD_DIR (default <repo>/build), CPU_N (loop iterations per run),
# PROFILER (default Debian's libprofiler.so.0; installed from libgoogle-perftools4 when
# missing), NO_BUILD=1 (use the build as is).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
CPU_N=${CPU_N:-3000000000}
PROFILER=${PROFILER:-/usr/lib/x86_64-linux-gnu/libprofiler.so.0}
LIBD9=$BUILD_DIR/libd9.so
ROUNDS=${1:-15}
case $ROUNDS in '' | *[!0-9]*) echo "usage: $0 [rounds]" >&2; exit 2 ;; esac

if [[ ! -f $PROFILER ]]; then
  echo "installing libgoogle-perftools4 for gperftools' profiler" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q libgoogle-perftools4 >/dev/null ||
    { $sudo apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
      $sudo apt-get install -y -q libgoogle-perftools4 >/dev/null; }
fi

echo "# command: ${0#"$ROOT"/} $*  (BUILD_DIR=$BUILD_DIR CPU_N=$CPU_N)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr)"
echo "# d9:      $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)," \
  "gperftools: $(dpkg-query -W -f='${Version}' libgoogle-perftools4 2>/dev/null || echo "$PROFILER")"

log=$(mktemp)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT" "$log"' EXIT
if [[ ${NO_BUILD:-0} != 1 ]]; then
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" >"$log" 2>&1 || { cat "$log"; exit 1; }
  fi
  make -C "$BUILD_DIR" -j2 d9 d9_cli >"$log" 2>&1 || { cat "$log"; exit 1; }
fi
BIN=$BUILD_DIR/bench-standalone
mkdir -p "$BIN"
if [[ ! -x $BIN/cpu_loop || $ROOT/bench/cpu_loop.c -nt $BIN/cpu_loop ]]; then
  ${CC:-cc} -std=c11 -O2 -Wall -Wextra -o "$BIN/cpu_loop" "$ROOT/bench/cpu_loop.c"
fi

CONFIGS=(plain d9-0 d9-99 d9-999 d9-99-seal gperf-99 gperf-999)

# run CONFIG: runs the loop once, prints "wall_seconds cpu_seconds samples"
run() {
  local cfg=$1 env=() samples=0
  rm -rf "$OUT/run"
  case $cfg in
    plain) ;;
    d9-99-seal) env=(LD_PRELOAD="$LIBD9" D9_OUTPUT="$OUT/run" D9_CPU_HZ=99) ;;
    d9-*) env=(LD_PRELOAD="$LIBD9" D9_OUTPUT="$OUT/run" D9_CPU_HZ="${cfg#d9-}" D9_SYMBOLIZE=0
      D9_COMPRESS=none) ;;
    gperf-*) env=(LD_PRELOAD="$PROFILER" CPUPROFILE="$OUT/run.prof" CPUPROFILE_FREQUENCY="${cfg#gperf-}") ;;
  esac
  local times
  times=$( { TIMEFORMAT='%R %U %S'; time env "${env[@]}" "$BIN/cpu_loop" "$CPU_N" 2>>"$log"; } 2>&1 ) || true
  # Samples: d9's CpuSampleEvents; gperftools' profile records (count, depth, pcs...).
  case $cfg in
    d9-*) [[ -d $OUT/run ]] && samples=$("$BUILD_DIR/d9" export --format jsonl "$OUT/run" 2>/dev/null |
      grep -c '"CpuSampleEvent"' || true) ;;
    gperf-*) [[ -f $OUT/run.prof ]] && samples=$(python3 -c '
import struct,sys
d=open(sys.argv[1],"rb").read(); w=struct.unpack_from("<%dQ"%(len(d)//8),d); i=5; n=0
while i+2<len(w):
  c,depth=w[i],w[i+1]
  if depth==1 and w[i+2]==0 and c==0: break
  n+=c; i+=2+depth
print(n)' "$OUT/run.prof" 2>/dev/null || echo 0) ;;
  esac
  read -r real user sys <<<"$times"
  echo "$real $(echo "$user + $sys" | bc -l) $samples"
}

declare -A WALL CPU RATIO CPU_RATIO SAMPLES
for ((r = 0; r < ROUNDS; r++)); do
  declare -A this=() this_cpu=()
  n=${#CONFIGS[@]}
  for ((i = 0; i < n; i++)); do
    cfg=${CONFIGS[$(((i + r) % n))]}
    read -r wall cpu samples < <(run "$cfg")
    this[$cfg]=$wall
    this_cpu[$cfg]=$cpu
    WALL[$cfg]+="$wall "
    CPU[$cfg]+="$cpu "
    SAMPLES[$cfg]+="$(echo "$samples / $cpu" | bc -l) "
  done
  for cfg in "${CONFIGS[@]}"; do
    RATIO[$cfg]+="$(echo "${this[$cfg]} / ${this[d9-0]}" | bc -l) "
    CPU_RATIO[$cfg]+="$(echo "${this_cpu[$cfg]} / ${this_cpu[d9-0]}" | bc -l) "
  done
  printf '.' >&2
done
echo >&2

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo
printf '%-10s %9s %9s %9s %9s %12s\n' config "wall (s)" "vs d9-0" "cpu (s)" "vs d9-0" "samples/cpu-s"
for cfg in "${CONFIGS[@]}"; do
  printf '%-10s %9.3f %8.4fx %9.3f %8.4fx %12.0f\n' "$cfg" "$(echo "${WALL[$cfg]}" | median)" \
    "$(echo "${RATIO[$cfg]}" | median)" "$(echo "${CPU[$cfg]}" | median)" \
    "$(echo "${CPU_RATIO[$cfg]}" | median)" "$(echo "${SAMPLES[$cfg]}" | median)"
done
echo "(medians of $ROUNDS interleaved rounds; samples/cpu-s: samples written per CPU second)"
