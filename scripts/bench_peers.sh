#!/usr/bin/env bash
# Peer benchmark (issue 7, item 2): d9 at defaults against the heap profilers people use
# today, on six workloads. Prints one table and writes it to docs/benchmarks.md. Not a test.
#
# Usage: scripts/bench_peers.sh [rounds]     (default 5; ~10 min on 2 cores)
#        scripts/bench_peers.sh --callgrind  instructions per unit of work under valgrind,
#                                            the same on every run (~10 min): each profiler's
#                                            overhead over jemalloc, and d9's as a fraction
#                                            of jeprof's. Not written to the doc.
#
# Configurations (in a rotating order every round, so drift hits all of them alike):
#   glibc     no preload
#   jemalloc  LD_PRELOAD=$JEMALLOC                          (baseline of every ratio)
#   d9        LD_PRELOAD=libd9.so at defaults: 512 KiB sampling, live set on, CPU 99 Hz
#   jeprof    jemalloc's profiler at the same rate: MALLOC_CONF=prof:true,lg_prof_sample:19
#   tcmalloc  gperftools' tcmalloc (libtcmalloc.so.4) with TCMALLOC_SAMPLE_PARAMETER=524288
#             (gperftools 2.10 reads this variable; its default, 0, samples nothing).
#             Sampled stacks are kept in memory for MallocExtension::GetHeapSample(); no
#             file is written. (HEAPPROFILE= would be the other profiler, which hooks
#             every allocation.)
#   heaptrack heaptrack -o FILE prog: traces EVERY allocation and free (no sampling) and
#             compresses the trace at exit; the wall time of the tool's run counts.
# Workloads:
#   alloc_loop      bench/alloc_loop.c: one-thread malloc/free loop        (ns/op, in-program)
#   cross_thread    bench/cross_thread.c: two threads, cross-thread frees  (ns/op, in-program)
#   container_churn bench/container_churn.cc: std::map/vector/string churn (ns/op, in-program)
#   python          /usr/bin/python3 dict/list/str churn                   (s, whole process)
#   sqlite          /usr/bin/sqlite3 :memory: with 200k INSERTs from a file (s, whole process)
#   redis           redis-server (preloaded) driven by redis-benchmark -q -n 100000
#                   -t set,get -P 16 on 127.0.0.1 (req/s; skipped if it can't be installed)
# Ratios are taken per round against that round's jemalloc run, then the median is
# printed. For time (ns/op, s) a ratio > 1 is slower; for redis it is the THROUGHPUT
# ratio, so < 1 is slower.
#
# Environment: BUILD_DIR (default <repo>/build), JEMALLOC, ALLOC_N, CROSS_N, CHURN_N,
# PY_N, SQL_N (work per run), REDIS_PORT (default 63079), DOC (default docs/benchmarks.md;
# empty: don't write), NO_BUILD=1 (use the build as is), NO_INSTALL=1 (never apt-get),
# CG_WORKLOADS (--callgrind only: which workloads, space-separated).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JEMALLOC=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
TCMALLOC=${TCMALLOC:-/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4}
LIBD9=$BUILD_DIR/libd9.so
BIN=$BUILD_DIR/bench
# Work per run: about 0.3-0.7 s under plain jemalloc, so that heaptrack (several times
# slower) still keeps 5 rounds under ~10 minutes.
ALLOC_N=${ALLOC_N:-15000000}
CROSS_N=${CROSS_N:-600000}
CHURN_N=${CHURN_N:-40000}
PY_N=${PY_N:-600000}
SQL_N=${SQL_N:-200000}
REDIS_PORT=${REDIS_PORT:-63079}
DOC=${DOC-$ROOT/docs/benchmarks.md}
JEPROF_CONF=prof:true,lg_prof_sample:19  # 2^19 = 512 KiB, d9's default D9_SAMPLE_RATE
TC_SAMPLE=524288

ROUNDS=5
MODE=wall
case ${1:-} in
  '') ;;
  --callgrind) MODE=callgrind ;;
  *[!0-9]*) echo "usage: $0 [--callgrind | rounds]" >&2; exit 2 ;;
  *) ROUNDS=$1 ;;
esac
COMMAND="scripts/bench_peers.sh $*"

# --- prerequisites -------------------------------------------------------------------
# ensure FILE PACKAGE: installs the Debian package only when FILE is missing; returns 1
# if it still is (no root, no network, NO_INSTALL=1).
ensure() {
  [[ -e $1 ]] && return 0
  if [[ ${NO_INSTALL:-0} != 1 ]]; then
    echo "# installing $2 (for $1)" >&2
    local sudo=; ((EUID == 0)) || sudo="sudo -n"
    { $sudo apt-get install -y --no-install-recommends "$2" || { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends "$2"; }; } >/dev/null 2>&1 || true
  fi
  [[ -e $1 ]]
}
ensure "$JEMALLOC" libjemalloc2 || { echo "missing $JEMALLOC" >&2; exit 1; }
ensure /usr/bin/python3 python3 || { echo "missing /usr/bin/python3" >&2; exit 1; }
ensure /usr/bin/sqlite3 sqlite3 || { echo "missing /usr/bin/sqlite3" >&2; exit 1; }
CONFIGS=(glibc jemalloc d9 jeprof)
ensure "$TCMALLOC" libgoogle-perftools4 && CONFIGS+=(tcmalloc) || echo "# note: no $TCMALLOC; tcmalloc skipped"
ensure /usr/bin/heaptrack heaptrack && CONFIGS+=(heaptrack) || echo "# note: no heaptrack; skipped"
WORKLOADS=(alloc_loop cross_thread container_churn python sqlite)
# redis-tools (redis-cli, redis-benchmark) comes with redis-server.
if ensure /usr/bin/redis-server redis-server && [[ -x /usr/bin/redis-benchmark && -x /usr/bin/redis-cli ]]; then
  WORKLOADS+=(redis)
else
  echo "# note: redis-server/redis-benchmark not available; redis skipped"
fi

log=$(mktemp)
OUT=$(mktemp -d)  # D9_OUTPUT, heaptrack files and working directory of every run
RESULTS=$OUT.results
trap 'rm -rf "$OUT" "$log" "$RESULTS" "$OUT".sql*' EXIT

if [[ ${NO_BUILD:-0} != 1 ]]; then
  # Reconfigure so that a build tree made before container_churn existed knows it.
  { cmake "$BUILD_DIR" && make -C "$BUILD_DIR" -j2 d9 alloc_loop cross_thread container_churn; } >"$log" 2>&1 ||
    { cat "$log"; exit 1; }
fi
for f in "$LIBD9" "$BIN/alloc_loop" "$BIN/cross_thread" "$BIN/container_churn"; do
  [[ -e $f ]] || { echo "missing $f" >&2; exit 1; }
done
# Same check as scripts/bench_overhead.sh: is jemalloc's profiler compiled in and on?
if ! env -i LD_PRELOAD="$JEMALLOC" MALLOC_CONF="$JEPROF_CONF,stats_print:true" /bin/true 2>&1 |
    grep -q 'opt.prof: true'; then
  echo "# note: $JEMALLOC has no --enable-prof; jeprof skipped"
  CONFIGS=("${CONFIGS[@]/jeprof/}")
fi

# sql_file N: one transaction of N single-row INSERTs, so the parser and the B-tree both
# allocate per statement.
sql_file() {
  awk -v n="$1" 'BEGIN {
    print "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INTEGER);"; print "BEGIN;"
    for (i = 0; i < n; i++) printf "INSERT INTO t(a, b) VALUES(%crow-%d%c, %d);\n", 39, i * 7919 % 100003, 39, i
    print "COMMIT;"; print "SELECT count(*) FROM t;" }'
}
sql_file "$SQL_N" >"$OUT.sql"

# py_churn N: the python workload's script, N iterations of dict/list/str churn.
py_churn() {
  echo "
d = {}
for i in range($1):
    k = str(i % 5000)
    d[k] = [i] * (i % 17)
    if i % 3 == 0:
        d.pop(str((i * 7) % 5000), None)
    l = [str(j) for j in range(i % 8)]
    s = {'a': l, 'b': k + 'x' * (i % 40)}
print(len(d))"
}
PY_CHURN=$(py_churn "$PY_N")

echo "# command: $COMMAND"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr)"

# --- one run -------------------------------------------------------------------------
# cmd_env CONFIG: env(1) arguments of a configuration, one per line. Runs start from
# env -i so that nothing from the caller's environment (an LD_PRELOAD, a MALLOC_CONF)
# leaks in; PATH is needed by the heaptrack script.
cmd_env() {
  echo "PATH=/usr/bin:/bin"
  case $1 in
    glibc|heaptrack) ;;
    jemalloc) echo "LD_PRELOAD=$JEMALLOC" ;;
    d9) echo "LD_PRELOAD=$LIBD9"; echo "D9_OUTPUT=$OUT" ;;
    jeprof) echo "LD_PRELOAD=$JEMALLOC"; echo "MALLOC_CONF=$JEPROF_CONF" ;;
    tcmalloc) echo "LD_PRELOAD=$TCMALLOC"; echo "TCMALLOC_SAMPLE_PARAMETER=$TC_SAMPLE" ;;
  esac
}

# launch CONFIG PROG ARGS...: runs PROG under CONFIG (heaptrack wraps it instead of a
# preload).
launch() {
  local cfg=$1; shift
  local -a envs wrap=()
  mapfile -t envs < <(cmd_env "$cfg")
  [[ $cfg == heaptrack ]] && wrap=(/usr/bin/heaptrack -o "$OUT/heaptrack")
  (cd "$OUT" && exec env -i "${envs[@]}" "${wrap[@]}" "$@")
}

now() { date +%s%N; }

# redis_rps CONFIG: requests/s of SET and GET together (total requests / total time)
# against a server started under CONFIG; the client is never preloaded.
redis_rps() {
  local cfg=$1 pid out i
  launch "$cfg" /usr/bin/redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
    --appendonly no --daemonize no --logfile '' >>"$log" 2>&1 &
  pid=$!
  for ((i = 0; i < 100; i++)); do  # up to 10 s: heaptrack starts slowly
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  out=$(redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -q -n 100000 -t set,get -P 16 2>>"$log" | tr '\r' '\n') || true
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true  # heaptrack writes its trace before it exits
  echo "$out" | awk '/^(SET|GET): .* requests per second/ { n++; t += 1 / $2 }
    END { if (n == 2) printf "%.0f\n", 2 / t; else print "NA" }'
}

# run CONFIG WORKLOAD: prints the workload's figure of one run, or NA (and how to
# reproduce it, on stderr) on failure.
run() {
  local cfg=$1 w=$2 out rc=0 t0 t1
  : >"$log"
  case $w in
    alloc_loop|cross_thread|container_churn)
      local -A n=([alloc_loop]=$ALLOC_N [cross_thread]=$CROSS_N [container_churn]=$CHURN_N)
      out=$(launch "$cfg" "$BIN/$w" "${n[$w]}" 2>"$log") || rc=$?
      # heaptrack prints its own lines around the program's output
      out=$(echo "$out" | sed -n 's/^ns_per_op=\([0-9.]*\) .*/\1/p') ;;
    python)
      t0=$(now); launch "$cfg" /usr/bin/python3 -c "$PY_CHURN" >/dev/null 2>"$log" || rc=$?; t1=$(now)
      out=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') ;;
    sqlite)
      t0=$(now); launch "$cfg" /usr/bin/sqlite3 :memory: <"$OUT.sql" >/dev/null 2>"$log" || rc=$?; t1=$(now)
      out=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') ;;
    redis) out=$(redis_rps "$cfg") ;;
  esac
  find "$OUT" -mindepth 1 -delete  # traces and profiles are not kept
  if [[ $rc != 0 || -z $out || $out == NA ]]; then
    { echo "FAILED (exit $rc): $cfg $w"; sed 's/^/  stderr: /' "$log" | head -20; } >&2
    echo NA
  else
    echo "$out"
  fi
}

# --- callgrind mode: instructions per unit of work -------------------------------------
# Each workload runs at two sizes; (Ir(N2) - Ir(N1)) / (N2 - N1) cancels start-up and exit,
# leaving what one more unit of work costs, all threads. valgrind runs one thread at a time
# and stretches CPU time ~50x, so d9 runs with D9_CPU_HZ=0 (allocation profiling only; the
# CPU sampler's cost is measured by scripts/bench_cpu.sh). heaptrack is left out: its
# interpreter is a second process fed through a pipe.
if [[ $MODE == callgrind ]]; then
  command -v valgrind >/dev/null || ensure /usr/bin/valgrind valgrind ||
    { echo "missing valgrind" >&2; exit 1; }
  declare -A N1=([alloc_loop]=200000 [cross_thread]=50000 [container_churn]=2000 [python]=20000 [sqlite]=10000)
  declare -A N2=([alloc_loop]=1200000 [cross_thread]=300000 [container_churn]=10000 [python]=120000 [sqlite]=60000)
  declare -A UNIT=([alloc_loop]=op [cross_thread]=op [container_churn]=round [python]=iteration [sqlite]=INSERT)
  CG_CONFIGS=()
  for c in jemalloc d9 jeprof tcmalloc; do [[ " ${CONFIGS[*]} " == *" $c "* ]] && CG_CONFIGS+=("$c"); done
  # instructions CONFIG WORKLOAD N: total Ir of one run, all processes and threads.
  instructions() {
    local cfg=$1 w=$2 n=$3 f=$OUT/cg.out
    local -a envs cmd
    local input=/dev/null
    mapfile -t envs < <(cmd_env "$cfg")
    [[ $cfg == d9 ]] && envs+=(D9_CPU_HZ=0)
    case $w in
      python) cmd=(/usr/bin/python3 -c "$(py_churn "$n")"); envs+=(PYTHONHASHSEED=0) ;;  # same dicts every run
      sqlite) input=$OUT.sql.$n; sql_file "$n" >"$input"; cmd=(/usr/bin/sqlite3 :memory:) ;;
      *) cmd=("$BIN/$w" "$n") ;;
    esac
    (cd "$OUT" && valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$f.%p" \
      env -i "${envs[@]}" "${cmd[@]}" <"$input" >/dev/null 2>"$log") ||
      { echo "FAILED under callgrind: $cfg $w $n" >&2; cat "$log" >&2; exit 1; }
    for g in "$f".*; do awk '/^(summary|totals):/ { print $2; exit }' "$g"; done | awk '{ s += $1 } END { print s }'
    find "$OUT" -mindepth 1 -delete
  }
  echo "# callgrind: configs ${CG_CONFIGS[*]}; d9 with D9_CPU_HZ=0"
  printf '\n%-26s %-9s %10s %10s %9s  %12s %9s\n' "" "" "per unit" "" "" "whole run" ""
  printf '%-26s %-9s %10s %10s %9s  %12s %9s\n' workload config "Ir" "+Ir" "of jeprof" "+Ir at N2" "of jeprof"
  read -r -a cg_workloads <<<"${CG_WORKLOADS:-alloc_loop cross_thread container_churn python sqlite}"
  for w in "${cg_workloads[@]}"; do
    declare -A A=() B=()
    for cfg in "${CG_CONFIGS[@]}"; do
      A[$cfg]=$(instructions "$cfg" "$w" "${N1[$w]}")
      B[$cfg]=$(instructions "$cfg" "$w" "${N2[$w]}")
    done
    for cfg in "${CG_CONFIGS[@]}"; do
      awk -v w="$w (${UNIT[$w]})" -v c="$cfg" -v n1="${N1[$w]}" -v n2="${N2[$w]}" \
        -v a="${A[$cfg]}" -v b="${B[$cfg]}" -v ja="${A[jemalloc]}" -v jb="${B[jemalloc]}" \
        -v pa="${A[jeprof]:-}" -v pb="${B[jeprof]:-}" '
        function share(x, p) { return (pb != "" && p > 0) ? sprintf("%.2f", x / p) : "NA" }
        BEGIN {
          unit = (b - a) / (n2 - n1); junit = (jb - ja) / (n2 - n1); punit = (pb - pa) / (n2 - n1)
          printf "%-26s %-9s %10.1f %+10.1f %9s  %+11.2f%% %9s\n", w, c, unit, unit - junit,
            c == "jemalloc" ? "" : share(unit - junit, punit - junit), 100 * (b - jb) / jb,
            c == "jemalloc" ? "" : share(b - jb, pb - jb) }'
    done
  done
  echo "# per unit: Ir = (Ir(N2) - Ir(N1)) / (N2 - N1), start-up and exit cancel out; whole run: all"
  echo "# instructions of the run at N2 against jemalloc's, start-up and exit included (d9 writes and"
  echo "# symbolizes its trace at exit; jeprof and tcmalloc keep their samples in memory). N1/N2:" \
    "$(for w in "${cg_workloads[@]}"; do printf '%s %s/%s, ' "$w" "${N1[$w]}" "${N2[$w]}"; done | sed 's/, $//')"
  echo "# of jeprof = (config - jemalloc) / (jeprof - jemalloc); issue 7 asks d9 <= 0.25"
  exit 0
fi

# --- rounds --------------------------------------------------------------------------
: >"$RESULTS"  # lines: workload round config value
read -r -a CONFIGS <<<"${CONFIGS[*]}"  # drops a skipped (emptied) entry
NC=${#CONFIGS[@]}
echo "# rounds:  $ROUNDS; configs: ${CONFIGS[*]}; order rotates each round"
for ((r = 1; r <= ROUNDS; r++)); do
  for w in "${WORKLOADS[@]}"; do
    line="round $r $(printf '%-15s' "$w")"
    for ((k = 0; k < NC; k++)); do
      cfg=${CONFIGS[(r + k) % NC]}
      echo "$w $r $cfg $(run "$cfg" "$w")" >>"$RESULTS"
    done
    # per-round ratios against this round's jemalloc run, in the fixed config order
    line+=$(awk -v w="$w" -v r="$r" -v configs="${CONFIGS[*]}" '
      $1 == w && $2 == r { v[$3] = $4 }
      END { nc = split(configs, c, " ")
            for (i = 1; i <= nc; i++) {
              x = v[c[i]]; j = v["jemalloc"]
              if (x == "NA" || j == "NA" || j == 0) s = "NA"
              else s = sprintf("%.3f", w == "redis" ? x / j : x / j)
              printf "  %s %s", c[i], s } }' "$RESULTS")
    echo "$line"
  done
done

# --- table ---------------------------------------------------------------------------
TABLE=$(awk -v configs="${CONFIGS[*]}" -v workloads="${WORKLOADS[*]}" '
  function median(a, n,   i, j, t) {  # insertion sort of a[1..n], then the median
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  $4 != "NA" { t[$1, $2, $3] = $4; rounds[$2] }
  END {
    nc = split(configs, c, " "); nw = split(workloads, wl, " ")
    unit["alloc_loop"] = "ns/op"; unit["cross_thread"] = "ns/op"; unit["container_churn"] = "ns/op"
    unit["python"] = "s"; unit["sqlite"] = "s"; unit["redis"] = "req/s"
    printf "| workload | unit |"; for (i = 1; i <= nc; i++) printf " %s |", c[i]; printf "\n"
    printf "|---|---|"; for (i = 1; i <= nc; i++) printf "---:|"; printf "\n"
    for (wi = 1; wi <= nw; wi++) {
      w = wl[wi]; printf "| %s | %s |", w (w == "redis" ? " (throughput)" : ""), unit[w]
      for (i = 1; i <= nc; i++) {
        n = 0; m = 0
        for (r in rounds) {
          if (!((w, r, c[i]) in t)) continue
          v[++n] = t[w, r, c[i]]
          if ((w, r, "jemalloc") in t) q[++m] = t[w, r, c[i]] / t[w, r, "jemalloc"]
        }
        if (n == 0) { printf " NA |"; continue }
        med = median(v, n)
        val = unit[w] == "req/s" ? sprintf("%.0f", med) : unit[w] == "s" ? sprintf("%.3f", med) : sprintf("%.1f", med)
        printf " %s (%s) |", m ? sprintf("%.2fx", median(q, m)) : "NA", val
      }
      printf "\n"
    }
  }' "$RESULTS")
echo
echo "$TABLE"
NOTE="Cells: median over rounds of the per-round ratio to plain jemalloc, then (in brackets) the median figure. Time rows: > 1x is slower. redis row: throughput ratio, < 1x is slower."
echo "# $NOTE"

if [[ -n $DOC ]]; then
  mkdir -p "$(dirname "$DOC")"
  # Hand-written text from a line '## Interpretation' on is kept across reruns.
  keep=
  [[ -f $DOC ]] && keep=$(sed -n '/^## Interpretation/,$p' "$DOC")
  {
    echo "# Peer benchmark"
    echo
    echo "Produced by \`$COMMAND\` on $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "$(nproc) cpus ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), $(uname -sr),"
    echo "d9 $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown);" \
      "$(dpkg-query -W -f='${Package} ${Version}, ' libjemalloc2 libgoogle-perftools4 heaptrack redis-server python3 sqlite3 2>/dev/null | sed 's/, $//')."
    echo "$ROUNDS interleaved rounds, configuration order rotated each round."
    echo
    echo "$TABLE"
    echo
    echo "$NOTE"
    echo
    echo "- glibc: no preload. jemalloc: \`LD_PRELOAD=libjemalloc.so.2\` (the baseline)."
    echo "- d9: \`LD_PRELOAD=build/libd9.so\` at defaults (512 KiB sampling, live set on, CPU 99 Hz), trace written to a temp dir."
    echo "- jeprof: jemalloc with \`MALLOC_CONF=$JEPROF_CONF\` (same 512 KiB rate; samples kept in memory, no dump)."
    echo "- tcmalloc: \`LD_PRELOAD=libtcmalloc.so.4 TCMALLOC_SAMPLE_PARAMETER=$TC_SAMPLE\` (gperftools 2.10 honours this variable; sampled stacks kept in memory for \`GetHeapSample()\`, no profile file written)."
    echo "- heaptrack: \`heaptrack -o FILE prog\`; traces every allocation and free (no sampling) and compresses the trace at exit."
    echo "- Work per run: alloc_loop $ALLOC_N ops, cross_thread $CROSS_N ops, container_churn $CHURN_N rounds (ns/op measured inside the program);" \
      "python $PY_N churn iterations and sqlite $SQL_N INSERTs (wall time of the whole process, including the tool's start-up and exit);" \
      "redis: server preloaded, \`redis-benchmark -q -n 100000 -t set,get -P 16\` on 127.0.0.1, SET+GET requests / total time. Debian's redis-server is linked to libjemalloc, so its glibc column is jemalloc too (a measure of the noise), and preloads replace that jemalloc."
    if [[ -n $keep ]]; then echo; echo "$keep"; fi
  } >"$DOC"
  echo "# wrote ${DOC#"$ROOT"/}"
fi
if grep -q ' NA$' "$RESULTS"; then
  echo "# some runs FAILED (NA); stderr shows how to reproduce them"
  exit 1
fi
