#!/usr/bin/env bash
# What d9 adds to a whole process: start-up, exit (the final seal) and fork children.
# Short-lived processes pay d9's fixed costs at every start and exit: shell pipelines,
# `git` subcommands, fork+exec children of services. Prints figures; not a test.
#
# Usage: scripts/bench_process.sh [rounds]    interleaved rounds (default 15), medians
#
# Configurations (rotating order every round):
#   plain     no preload (baseline of every ratio)
#   jemalloc  LD_PRELOAD=$JEMALLOC
#   d9-off    LD_PRELOAD=libd9.so D9_ENABLE=0
#   d9        LD_PRELOAD=libd9.so, defaults (live set on, CPU 99 Hz, symbols at seal)
#   d9-nosym  LD_PRELOAD=libd9.so D9_SYMBOLIZE=0  (symbols left to `d9 symbolize`)
#   d9-full   LD_PRELOAD=libd9.so D9_SYMBOLIZE=full (also inflates compressed debug files)
# Workloads: `ls /usr`, `git status` on this repository, `sh -c 'echo | sort | wc'` (three
# processes), a Python script (Debian's /usr/bin/python3) that forks 40 children which
# allocate 1 MB each and exit, and bench/spawn_loop: 100 fork+exec of /bin/true, one at a
# time (both sides preloaded).
#
# Environment: BUILD_DIR (default <repo>/build), JEMALLOC (default Debian's libjemalloc2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JEMALLOC=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
LIBD9=$BUILD_DIR/libd9.so
ROUNDS=${1:-15}
[[ $ROUNDS =~ ^[0-9]+$ ]] || { echo "usage: $0 [rounds]" >&2; exit 2; }
[[ -f $LIBD9 && -x $BUILD_DIR/bench/spawn_loop ]] ||
  { echo "missing $LIBD9 or bench/spawn_loop (bash scripts/build.sh)" >&2; exit 1; }
[[ -f $JEMALLOC ]] || { echo "missing $JEMALLOC (apt-get install libjemalloc2)" >&2; exit 1; }

echo "# command: ${0#"$ROOT"/} $*  (BUILD_DIR=$BUILD_DIR)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(uname -sr);" \
  "libc6-dbg $(dpkg-query -W -f='${Version}' libc6-dbg 2>/dev/null || echo 'not installed')"
echo "# d9:      $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"

OUT=$(mktemp -d)  # working directory and D9_OUTPUT of every run
trap 'rm -rf "$OUT"' EXIT
cat >"$OUT/forks.py" <<'EOF'
import os, sys
for i in range(40):
    pid = os.fork()
    if pid == 0:
        x = [bytearray(1000) for _ in range(1000)]
        sys.exit(0)
    os.waitpid(pid, 0)
EOF

configs=(plain jemalloc d9-off d9 d9-nosym d9-full)
workloads=(ls git-status sh-pipeline py-40-forks spawn-100)

env_of() {
  case $1 in
    plain) ;;
    jemalloc) echo "LD_PRELOAD=$JEMALLOC" ;;
    d9-off) echo "LD_PRELOAD=$LIBD9 D9_ENABLE=0" ;;
    d9) echo "LD_PRELOAD=$LIBD9" ;;
    d9-nosym) echo "LD_PRELOAD=$LIBD9 D9_SYMBOLIZE=0" ;;
    d9-full) echo "LD_PRELOAD=$LIBD9 D9_SYMBOLIZE=full" ;;
  esac
}

command_of() {
  case $1 in
    ls) echo "ls /usr" ;;
    git-status) echo "git -C $ROOT status" ;;
    sh-pipeline) echo "sh" ;;  # its -c script is set in time_once
    py-40-forks) echo "/usr/bin/python3 $OUT/forks.py" ;;
    spawn-100) echo "$BUILD_DIR/bench/spawn_loop 100" ;;
  esac
}

# Milliseconds of wall time for one run (median of 5 back-to-back runs for the short ones).
# The command is exec'd by env, so only the workload's own processes carry the preload.
time_once() {
  local config=$1 workload=$2 reps=5 t=() cmd
  [[ $workload == py-40-forks || $workload == spawn-100 ]] && reps=1
  read -r -a cmd <<<"$(command_of "$workload")"
  [[ $workload == sh-pipeline ]] && cmd=(sh -c 'echo a | sort | wc -l')
  for ((i = 0; i < reps; i++)); do
    rm -rf "$OUT/d9-traces"
    local start end
    start=$(date +%s%N)
    (cd "$OUT" && env $(env_of "$config") D9_OUTPUT="$OUT/d9-traces" "${cmd[@]}" >/dev/null 2>&1)
    end=$(date +%s%N)
    t+=($(((end - start) / 1000)))
  done
  printf '%s\n' "${t[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]/1000}'
}

declare -A samples
for ((round = 0; round < ROUNDS; round++)); do
  for workload in "${workloads[@]}"; do
    n=${#configs[@]}
    for ((k = 0; k < n; k++)); do
      config=${configs[$(((k + round) % n))]}
      samples[$workload,$config]+="$(time_once "$config" "$workload") "
    done
  done
  printf '.' >&2
done
echo >&2

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '\n%-12s' "ms (median)"
for config in "${configs[@]}"; do printf ' %10s' "$config"; done
printf '   %s\n' "d9 - plain"
for workload in "${workloads[@]}"; do
  printf '%-12s' "$workload"
  for config in "${configs[@]}"; do
    printf ' %10.2f' "$(echo "${samples[$workload,$config]}" | median)"
  done
  base=$(echo "${samples[$workload,plain]}" | median)
  d9=$(echo "${samples[$workload,d9]}" | median)
  printf '   %+.2f ms\n' "$(echo "$d9 - $base" | bc -l)"
done
