#!/usr/bin/env bash
# Allocation overhead of libd9 compared with plain jemalloc. Prints figures; not a test.
#
# Usage: scripts/bench_overhead.sh [rounds]     interleaved rounds (default 15); prints one
#                                               table of wall time, one of process CPU time
#        scripts/bench_overhead.sh --callgrind  instructions per op under valgrind (the
#                                               wall clock is noisy on small shared machines)
#
# Configurations (each workload is run under each, in a rotating order every round):
#   glibc     no preload (reference only)
#   jemalloc  LD_PRELOAD=$JEMALLOC                      (baseline of every ratio)
#   je+thread the same, with one idle extra thread (BENCH_IDLE_THREAD=1): what any
#             profiler with a thread of its own costs a one-thread program (glibc's
#             mutex unlock turns atomic once a second thread exists; jemalloc locks an
#             arena mutex for every large allocation). cross_thread has threads already.
#   jeprof    the same as jemalloc with jemalloc's own profiler at d9's 512 KiB rate
#   d9-off    LD_PRELOAD=libd9.so D9_ENABLE=0           (target <= 1.01x jemalloc)
#   d9-nolive LD_PRELOAD=libd9.so D9_LIVESET=0          (sampling without free tracking)
#   d9        LD_PRELOAD=libd9.so, defaults: live set on (target <= 1.05x jemalloc)
# Workloads: bench/alloc_loop.c (one thread) and bench/cross_thread.c (two threads,
# cross-thread frees). Ratios are taken per round against that round's jemalloc run,
# then the median is printed.
#
# Environment: BUILD_DIR (default <repo>/build), JEMALLOC (default Debian's
# libjemalloc2), ALLOC_N / CROSS_N (iterations per run), NO_BUILD=1 (use the build as is).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JEMALLOC=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
ALLOC_N=${ALLOC_N:-40000000}
CROSS_N=${CROSS_N:-8000000}
LIBD9=$BUILD_DIR/libd9.so
JEPROF_CONF=prof:true,lg_prof_sample:19  # 2^19 = 512 KiB, d9's default D9_SAMPLE_RATE

MODE=wall
ROUNDS=15
for arg in "$@"; do
  case $arg in
    --callgrind) MODE=callgrind ;;
    ''|*[!0-9]*) echo "usage: $0 [--callgrind] [rounds]" >&2; exit 2 ;;
    *) ROUNDS=$arg ;;
  esac
done

echo "# command: ${0#"$ROOT"/} $*  (BUILD_DIR=$BUILD_DIR ALLOC_N=$ALLOC_N CROSS_N=$CROSS_N)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr)"
echo "# d9:      $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)," \
  "jemalloc: $(dpkg-query -W -f='${Package} ${Version}' libjemalloc2 2>/dev/null || echo "$JEMALLOC")"

# --- build -------------------------------------------------------------------------
log=$(mktemp)
OUT=$(mktemp -d)  # D9_OUTPUT of every d9 run; also the working directory of all runs
trap 'rm -rf "$OUT" "$log"' EXIT
if [[ ${NO_BUILD:-0} != 1 ]]; then
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -DD9_BUILD_TESTS=OFF >"$log" 2>&1 || { cat "$log"; exit 1; }
  fi
  make -C "$BUILD_DIR" -j2 d9 >"$log" 2>&1 || { cat "$log"; exit 1; }
fi
[[ -f $LIBD9 ]] || { echo "missing $LIBD9" >&2; exit 1; }
[[ -f $JEMALLOC ]] || { echo "missing $JEMALLOC (apt-get install libjemalloc2)" >&2; exit 1; }

# The bench programs are targets of bench/CMakeLists.txt when tests are configured;
# otherwise compile them here with the same flags (plain libc, -O2).
if [[ -f $BUILD_DIR/bench/Makefile && ${NO_BUILD:-0} != 1 ]]; then
  make -C "$BUILD_DIR" -j2 alloc_loop cross_thread >"$log" 2>&1 || { cat "$log"; exit 1; }
  BIN=$BUILD_DIR/bench
elif [[ -x $BUILD_DIR/bench/alloc_loop && -x $BUILD_DIR/bench/cross_thread ]]; then
  BIN=$BUILD_DIR/bench
else
  BIN=$BUILD_DIR/bench-standalone
  mkdir -p "$BIN"
  for prog in alloc_loop cross_thread; do
    if [[ ! -x $BIN/$prog || $ROOT/bench/$prog.c -nt $BIN/$prog ]]; then
      ${CC:-cc} -std=c11 -O2 -Wall -Wextra -pthread -o "$BIN/$prog" "$ROOT/bench/$prog.c"
    fi
  done
fi

# --- configurations ----------------------------------------------------------------
CONFIGS=(glibc jemalloc je+thread jeprof d9-off d9-nolive d9)
# Check that jemalloc's profiler is compiled in and really on with JEPROF_CONF.
if ! env -i LD_PRELOAD="$JEMALLOC" MALLOC_CONF="$JEPROF_CONF,stats_print:true" /bin/true 2>&1 |
    grep -q 'opt.prof: true'; then
  echo "# note:    $JEMALLOC has no --enable-prof; the jeprof configuration is skipped"
  CONFIGS=(glibc jemalloc je+thread d9-off d9-nolive d9)
fi

# cmd_env CONFIG: prints the env(1) arguments of a configuration, one per line.
cmd_env() {
  case $1 in
    glibc) ;;
    jemalloc) echo "LD_PRELOAD=$JEMALLOC" ;;
    je+thread) echo "LD_PRELOAD=$JEMALLOC"; echo "BENCH_IDLE_THREAD=1" ;;
    jeprof) echo "LD_PRELOAD=$JEMALLOC"; echo "MALLOC_CONF=$JEPROF_CONF" ;;
    d9-off) echo "LD_PRELOAD=$LIBD9"; echo "D9_ENABLE=0"; echo "D9_OUTPUT=$OUT" ;;
    d9-nolive) echo "LD_PRELOAD=$LIBD9"; echo "D9_LIVESET=0"; echo "D9_OUTPUT=$OUT" ;;
    d9) echo "LD_PRELOAD=$LIBD9"; echo "D9_OUTPUT=$OUT" ;;
  esac
}

# run CONFIG PROG N: prints "<wall ns/op> <cpu ns/op>" of one run, or "NA NA" (and how to
# reproduce it, on stderr) on failure.
run() {
  local cfg=$1 prog=$2 n=$3 out rc=0
  local -a envs
  mapfile -t envs < <(cmd_env "$cfg")
  out=$(cd "$OUT" && env -i "${envs[@]}" "$BIN/$prog" "$n" 2>"$log") || rc=$?
  rm -rf "${OUT:?}"/*  # d9 traces are not kept
  if [[ $rc != 0 || $out != "ns_per_op="*" cpu_ns_per_op="* ]]; then
    {
      echo "FAILED (exit $rc): env -i ${envs[*]} $BIN/$prog $n"
      echo "  stdout: $out"; sed 's/^/  stderr: /' "$log" | head -20
    } >&2
    echo NA NA
  else
    out=${out#ns_per_op=}
    echo "${out/ cpu_ns_per_op=/ }"
  fi
}

WORKLOADS=(alloc_loop cross_thread)
declare -A N=([alloc_loop]=$ALLOC_N [cross_thread]=$CROSS_N)
NC=${#CONFIGS[@]}

# --- callgrind mode: instructions per op, difference of two N to cancel start-up ----
if [[ $MODE == callgrind ]]; then
  declare -A N1=([alloc_loop]=200000 [cross_thread]=50000)
  declare -A N2=([alloc_loop]=1200000 [cross_thread]=300000)
  # Total instructions (all threads) of one run. valgrind itself is not preloaded:
  # LD_PRELOAD reaches the program through env(1), followed with --trace-children=yes.
  # (valgrind runs one thread at a time, so cross_thread hardly ever waits in backoff().)
  instructions() {
    local cfg=$1 prog=$2 n=$3 f=$OUT/cg.out
    local -a envs
    mapfile -t envs < <(cmd_env "$cfg")
    # CPU sampling runs on CPU time, which valgrind stretches ~50x: at 99 Hz it would take
    # 50x the samples per op it takes natively. Its cost is measured by bench_cpu.sh.
    [[ $cfg == d9* ]] && envs+=(D9_CPU_HZ=0)
    (cd "$OUT" && valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$f" \
      env -i "${envs[@]}" "$BIN/$prog" "$n" >/dev/null 2>"$log") ||
      { echo "FAILED under callgrind: $cfg $prog $n" >&2; cat "$log" >&2; exit 1; }
    awk '/^(summary|totals):/ { print $2; exit }' "$f"
    rm -rf "${OUT:?}"/*
  }
  printf '\n%-13s %-9s %12s %14s %9s\n' workload config "Ir/op" "vs jemalloc" ratio
  for w in "${WORKLOADS[@]}"; do
    declare -A IPO=()
    for cfg in "${CONFIGS[@]}"; do
      a=$(instructions "$cfg" "$w" "${N1[$w]}")
      b=$(instructions "$cfg" "$w" "${N2[$w]}")
      IPO[$cfg]=$(awk -v a="$a" -v b="$b" -v n1="${N1[$w]}" -v n2="${N2[$w]}" \
        'BEGIN { printf "%.2f", (b - a) / (n2 - n1) }')
    done
    for cfg in "${CONFIGS[@]}"; do
      awk -v w="$w" -v c="$cfg" -v x="${IPO[$cfg]}" -v j="${IPO[jemalloc]}" \
        'BEGIN { printf "%-13s %-9s %12.1f %+14.1f %8.3fx\n", w, c, x, x - j, x / j }'
    done
  done
  echo "# Ir/op = (Ir(N2) - Ir(N1)) / (N2 - N1), all threads; N1/N2: alloc_loop ${N1[alloc_loop]}/${N2[alloc_loop]}, cross_thread ${N1[cross_thread]}/${N2[cross_thread]}"
  echo "# d9 configurations run with D9_CPU_HZ=0 here (allocation profiling only). valgrind maps"
  echo "# the heap below d9's sampled-heap reservation, natively it lies above: each free here pays"
  echo "# the second bound check (+2 Ir/op for d9-nolive and d9) that native runs do not."
  exit 0
fi

# --- wall-clock mode ---------------------------------------------------------------
RESULTS=$OUT.results
trap 'rm -rf "$OUT" "$log" "$RESULTS"' EXIT
: >"$RESULTS"  # lines: workload round config wall_ns cpu_ns
echo "# rounds:  $ROUNDS (+1 warm-up round discarded), configs rotate each round"
for ((r = 0; r <= ROUNDS; r++)); do
  for w in "${WORKLOADS[@]}"; do
    for ((k = 0; k < NC; k++)); do
      cfg=${CONFIGS[(r + k) % NC]}
      t=$(run "$cfg" "$w" "${N[$w]}")
      if ((r > 0)); then echo "$w $r $cfg $t" >>"$RESULTS"; fi
    done
  done
  printf '# round %d/%d done\r' "$r" "$ROUNDS" >&2
done
echo >&2

# table COLUMN TITLE [BASE [CONFIGS...]]: medians of ns/op and of the per-round ratio
# against BASE (default jemalloc).
table() {
  local col=$1 title=$2 base=${3:-jemalloc}
  local -a configs=("${CONFIGS[@]}")
  (($# > 3)) && configs=("${@:4}")
  awk -v col="$col" -v title="$title" -v base="$base" -v configs="${configs[*]}" -v workloads="${WORKLOADS[*]}" '
    function median(a, n,   i, j, t) {  # insertion sort of a[1..n], then the median
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $col != "NA" { t[$1, $2, $3] = $col; rounds[$2] }
    END {
      nc = split(configs, names, " "); nw = split(workloads, wnames, " ")
      if (base == "jemalloc") { target["d9-off"] = 1.01; target["d9-nolive"] = 1.03; target["d9"] = 1.05 }
      printf "\n%s\n", title
      printf "%-13s %-9s %8s %8s %8s %8s %14s %8s  %s\n", "workload", "config", "median", "min", "max", "ratio", "ratio", "ratio", "target"
      printf "%-13s %-9s %8s %8s %8s %8s %14s %8s\n", "", "", "ns/op", "ns/op", "ns/op", "median", "min..max", "of mins"
      for (k in t) {  # the fastest base run of each workload
        split(k, f, SUBSEP)
        if (f[3] == base && (!(f[1] in jemin) || t[k] < jemin[f[1]])) jemin[f[1]] = t[k]
      }
      for (wi = 1; wi <= nw; wi++) for (ci = 1; ci <= nc; ci++) {
        ww = wnames[wi]; cc = names[ci]; n = 0; m = 0; lo = 1e300; hi = 0; rlo = 1e300; rhi = 0
        for (r in rounds) {
          if (!((ww, r, cc) in t)) continue
          x = t[ww, r, cc]; v[++n] = x; if (x < lo) lo = x; if (x > hi) hi = x
          if (!((ww, r, base) in t)) continue
          q = x / t[ww, r, base]; rr[++m] = q; if (q < rlo) rlo = q; if (q > rhi) rhi = q
        }
        if (n == 0) { printf "%-13s %-9s %8s\n", ww, cc, "NA"; continue }
        med = median(v, n); rmed = m ? median(rr, m) : 0
        verdict = (cc in target) ? sprintf("<= %.2fx %s", target[cc], rmed <= target[cc] ? "met" : "MISSED") : ""
        rmin = (ww in jemin) ? sprintf("%7.3fx", lo / jemin[ww]) : "NA"
        printf "%-13s %-9s %8.2f %8.2f %8.2f %7.3fx %6.3f..%-6.3f %8s  %s\n", ww, cc, med, lo, hi, rmed, rlo, rhi, rmin, verdict
      }
    }' "$RESULTS"
}
# Ratio of mins: each configuration's fastest run over jemalloc's fastest. On a shared
# machine interference only ever slows a run down, so the fastest is the least disturbed.
table 4 "Wall clock (ratio: per round vs the same round's jemalloc run, then median)"
table 5 "CPU time of the whole process, all threads (same ratios)"
table 5 "CPU time against je+thread: d9's cost beyond having a thread at all" je+thread je+thread d9-off d9-nolive d9
echo "# alloc_loop: 1 op = 1 malloc + 1 free (N=$ALLOC_N); cross_thread: 1 op = 1 object handed" \
  "to the other thread + 1 local malloc/free on each thread (N=$CROSS_N)"
if grep -q ' NA' "$RESULTS"; then
  echo "# some runs FAILED (NA); stderr shows how to reproduce them"
  exit 1
fi
