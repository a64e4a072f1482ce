#!/usr/bin/env bash
# Latency benchmark (issue 19: no stalls on host threads): how long single malloc and free
# calls take under d9 next to plain jemalloc, and what that does to redis' request latency.
# Prints figures; not a test.
#
# Usage: scripts/bench_latency.sh [rounds]   interleaved rounds (default 7; ~1 min each)
#
# Configurations (in a rotating order every round, so drift hits all of them alike):
#   jemalloc  LD_PRELOAD=$JEMALLOC                          (baseline of every ratio)
#   d9        LD_PRELOAD=libd9.so at defaults (512 KiB sampling, live set on, CPU 99 Hz)
#   d9-4k     the same at D9_SAMPLE_RATE=4096 (a sample every few calls: the sampled path)
# Every d9 run must leave a trace with allocation samples (counted with `d9 summary
# --json`), so that a d9 which silently turned itself off can't pass for a fast one.
#
# Part 1, bench/latency_probe.c: 4 paced threads plus 4 late short-lived ones allocate and
#   free for 2 s and time every call with the TSC. Per configuration: the median over rounds
#   of p50/p99/p99.9/p99.99, the max over rounds of the max, the ops above 1 ms (summed, and
#   split by what the thread's context-switch counters say: blocked = the call slept or
#   waited, preempted = the scheduler took the CPU away, oncpu = neither), and each figure's
#   ratio to the same round's jemalloc run (median over rounds). The slowest calls of the
#   d9 runs follow with the thread's age and bytes allocated so far (a first-sample stall is
#   at a small thread_kib) and the slowest of the jemalloc runs for comparison; slow calls
#   of several threads at the same moment are marked (a shared lock, or no CPU for anyone);
#   a last count sets blocked calls in a thread's first 5 ms apart from later ones.
# Part 2, redis: redis-server preloaded per configuration (--save '' --appendonly no, on a
#   free port of 127.0.0.1), driven by `redis-benchmark -c 50 -d 128 -n 300000 -t set,get
#   --csv` (not preloaded). Medians over rounds of p50/p99/max per command, the max of max,
#   and the median of the per-round ratios to jemalloc.
#
# Issue 19's targets: d9's max malloc latency within 2x jemalloc's in the same run and never
# above 1 ms from d9's own work; redis p99 within +5% of jemalloc's.
#
# Environment: BUILD_DIR (default <repo>/build), JEMALLOC (default Debian's libjemalloc2),
# PROBE_ARGS (latency_probe's options, default none: -t 4 -s 2 -l 4 -p 50), REDIS_N
# (requests per command, default 300000; much less and a d9 run may take no allocation
# sample, which counts as a failure), NO_REDIS=1 (part 1 only), NO_BUILD=1 (use the build
# as is).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JEMALLOC=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
LIBD9=$BUILD_DIR/libd9.so
D9CLI=$BUILD_DIR/d9
PROBE_ARGS=${PROBE_ARGS:-}
REDIS_N=${REDIS_N:-300000}

ROUNDS=7
case ${1:-} in
  '') ;;
  *[!0-9]* | 0) echo "usage: $0 [rounds]" >&2; exit 2 ;;
  *) ROUNDS=$1 ;;
esac

echo "# command: ${0#"$ROOT"/} $*  (BUILD_DIR=$BUILD_DIR PROBE_ARGS='$PROBE_ARGS' REDIS_N=$REDIS_N)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# d9:      $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)," \
  "$(dpkg-query -W -f='${Package} ${Version}, ' libjemalloc2 redis-server 2>/dev/null | sed 's/, $//')"

# --- build ---------------------------------------------------------------------------
log=$(mktemp)
OUT=$(mktemp -d)  # D9_OUTPUT (one subdirectory per run) and working directory of all runs
RESULTS=$OUT.results
STALLS=$OUT.stalls
SERVER_PID=
cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null
  rm -rf "$OUT" "$log" "$RESULTS" "$STALLS" "$STALLS.all"
}
trap cleanup EXIT
if [[ ${NO_BUILD:-0} != 1 ]]; then
  if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
    cmake -S "$ROOT" -B "$BUILD_DIR" -DD9_BUILD_TESTS=OFF >"$log" 2>&1 || { cat "$log"; exit 1; }
  fi
  make -C "$BUILD_DIR" -j2 d9 d9_cli >"$log" 2>&1 || { cat "$log"; exit 1; }
fi
for f in "$LIBD9" "$D9CLI" "$JEMALLOC"; do
  [[ -e $f ]] || { echo "missing $f" >&2; exit 1; }
done
# latency_probe is a target of bench/CMakeLists.txt when tests are configured; otherwise it
# is compiled here with the same flags (plain libc and pthreads, -O2).
if [[ -f $BUILD_DIR/bench/Makefile && ${NO_BUILD:-0} != 1 ]]; then
  make -C "$BUILD_DIR" -j2 latency_probe >"$log" 2>&1 || { cat "$log"; exit 1; }
  PROBE=$BUILD_DIR/bench/latency_probe
elif [[ -x $BUILD_DIR/bench/latency_probe ]]; then
  PROBE=$BUILD_DIR/bench/latency_probe
else
  PROBE=$BUILD_DIR/bench-standalone/latency_probe
  mkdir -p "$(dirname "$PROBE")"
  if [[ ! -x $PROBE || $ROOT/bench/latency_probe.c -nt $PROBE ]]; then
    ${CC:-cc} -std=c11 -O2 -Wall -Wextra -pthread -o "$PROBE" "$ROOT/bench/latency_probe.c"
  fi
fi
WITH_REDIS=1
if [[ ${NO_REDIS:-0} == 1 ]]; then
  WITH_REDIS=0
elif [[ ! -x /usr/bin/redis-server || ! -x /usr/bin/redis-benchmark || ! -x /usr/bin/redis-cli ]]; then
  echo "# note:    redis-server/redis-benchmark not installed (apt-get install redis-server); redis part skipped"
  WITH_REDIS=0
fi

CONFIGS=(jemalloc d9 d9-4k)
NC=${#CONFIGS[@]}

# cmd_env CONFIG DIR: env(1) arguments of a configuration, one per line. Runs start from
# env -i so that nothing from the caller's environment (an LD_PRELOAD, a MALLOC_CONF) leaks in.
cmd_env() {
  echo "PATH=/usr/bin:/bin"
  case $1 in
    jemalloc) echo "LD_PRELOAD=$JEMALLOC" ;;
    d9) echo "LD_PRELOAD=$LIBD9"; echo "D9_OUTPUT=$2" ;;
    d9-4k) echo "LD_PRELOAD=$LIBD9"; echo "D9_OUTPUT=$2"; echo "D9_SAMPLE_RATE=4096" ;;
  esac
}

# launch CONFIG DIR PROG ARGS...: runs PROG under CONFIG in DIR.
launch() {
  local cfg=$1 dir=$2
  shift 2
  local -a envs
  mapfile -t envs < <(cmd_env "$cfg" "$dir")
  (cd "$dir" && exec env -i "${envs[@]}" "$@")
}

# trace_samples CONFIG DIR: allocation samples d9 wrote into DIR (0 if none); "-" for
# configurations without d9.
trace_samples() {
  [[ $1 == d9* ]] || { echo -; return; }
  "$D9CLI" summary --json "$2" 2>>"$log" |
    sed -n 's/.*"alloc":{[^}]*"samples":\([0-9]*\).*/\1/p' | grep . || echo 0
}

# probe_run ROUND CONFIG: one latency_probe run; appends its figures to $RESULTS and its
# slowest calls to $STALLS. Returns 1 (and says how to reproduce) on failure.
probe_run() {
  local r=$1 cfg=$2 dir=$OUT/run out rc=0 samples
  mkdir -p "$dir"
  : >"$log"
  # shellcheck disable=SC2086  # PROBE_ARGS is a list of options
  out=$(launch "$cfg" "$dir" "$PROBE" $PROBE_ARGS 2>"$log") || rc=$?
  samples=$(trace_samples "$cfg" "$dir")
  rm -rf "$dir"
  if [[ $rc != 0 || $out != *$'\nmalloc ops='*$'\nfree ops='* || $samples == 0 ]]; then
    {
      echo "FAILED (exit $rc, d9 samples $samples): $cfg: $(cmd_env "$cfg" DIR | tr '\n' ' ')$PROBE $PROBE_ARGS"
      echo "$out" | head -5 | sed 's/^/  stdout: /'; sed 's/^/  stderr: /' "$log" | head -20
    } >&2
    return 1
  fi
  # "malloc ops=N p50=.. p99=.. p99.9=.. p99.99=.. max=.. over_1ms=.. blocked=.. preempted=.. oncpu=.."
  echo "$out" | awk -v r="$r" -v c="$cfg" -v s="$samples" '
    $1 == "malloc" || $1 == "free" {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      print "probe", r, c, $1, v["p50"], v["p99"], v["p99.9"], v["p99.99"], v["max"], v["over_1ms"], v["blocked"], v["preempted"], v["oncpu"], s
    }' >>"$RESULTS"
  echo "$out" | awk -v r="$r" -v c="$cfg" '$1 == "outlier" { sub(/^outlier /, ""); print c, r, $0 }' >>"$STALLS"
}

# redis_run ROUND CONFIG: one redis-server under CONFIG on a free port, one redis-benchmark
# against it; appends "redis ROUND CONFIG SET|GET p50 p99 max rps samples" to $RESULTS.
redis_run() {
  local r=$1 cfg=$2 dir=$OUT/run port='' out='' rc=0 samples try i
  mkdir -p "$dir"
  : >"$log"
  for ((try = 0; try < 5; try++)); do
    local p=$((20000 + RANDOM % 40000))
    launch "$cfg" "$dir" /usr/bin/redis-server --bind 127.0.0.1 --port "$p" --save '' \
      --appendonly no --daemonize no --logfile '' >>"$log" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do  # up to 10 s; a taken port makes the server exit
      kill -0 "$SERVER_PID" 2>/dev/null || break
      if env -i /usr/bin/redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null | grep -q PONG; then
        port=$p
        break
      fi
      sleep 0.1
    done
    if [[ -z $port ]]; then
      kill "$SERVER_PID" 2>/dev/null || true
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=
    else
      break
    fi
  done
  if [[ -n $port ]]; then
    out=$(timeout 600 env -i /usr/bin/redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -d 128 \
      -n "$REDIS_N" -t set,get --csv 2>>"$log") || rc=$?
    env -i /usr/bin/redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 ||
      kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true  # d9 seals its trace as the server exits
  else
    rc=no-server
  fi
  SERVER_PID=
  samples=$(trace_samples "$cfg" "$dir")
  rm -rf "$dir"
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  out=$(echo "$out" | tr -d '"' | awk -F, -v r="$r" -v c="$cfg" -v s="$samples" '
    $1 == "SET" || $1 == "GET" { print "redis", r, c, $1, $5, $7, $8, $2, s; n++ }
    END { exit n == 2 ? 0 : 1 }') || { [[ $rc != 0 ]] || rc=bad-output; }
  if [[ $rc != 0 || $samples == 0 ]]; then
    { echo "FAILED redis ($rc, d9 samples $samples): $cfg"; sed 's/^/  log: /' "$log" | tail -20; } >&2
    return 1
  fi
  echo "$out" >>"$RESULTS"
}

# --- rounds --------------------------------------------------------------------------
: >"$RESULTS"
: >"$STALLS"
FAILED=0
echo "# rounds:  $ROUNDS; configs: ${CONFIGS[*]}; order rotates each round"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < NC; k++)); do
    probe_run "$r" "${CONFIGS[(r + k) % NC]}" || FAILED=1
  done
  echo "round $r probe $(awk -v r="$r" '$1 == "probe" && $2 == r && $4 == "malloc" {
    printf "  %s malloc p99.99 %s max %s ns", $3, $8, $9 }' "$RESULTS")"
  if ((WITH_REDIS)); then
    for ((k = 0; k < NC; k++)); do
      redis_run "$r" "${CONFIGS[(r + k) % NC]}" || FAILED=1
    done
    echo "round $r redis $(awk -v r="$r" '$1 == "redis" && $2 == r && $4 == "SET" {
      printf "  %s SET p99 %s max %s ms", $3, $6, $7 }' "$RESULTS")"
  fi
done

# --- tables --------------------------------------------------------------------------
AWK_MEDIAN='
  function median(a, n,   i, j, t) {  # insertion sort of a[1..n], then the median
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }'

# probe table: fields 5..9 percentiles and max (ns), 10..13 ops above 1 ms by cause
for kind in malloc free; do
  awk -v kind="$kind" -v configs="${CONFIGS[*]}" "$AWK_MEDIAN"'
    $1 == "probe" && $4 == kind { for (f = 5; f <= 14; f++) t[$2, $3, f] = $f; rounds[$2] }
    END {
      nc = split(configs, c, " ")
      printf "\nlatency_probe: %s latency (ns). Medians over rounds; max: the largest of any round;\n", kind
      printf "ratios: the median of per-round ratios to the same round'"'"'s jemalloc run.\n"
      printf "%-9s %6s %6s %7s %7s %8s %9s  %6s %6s %6s %6s %6s  %s\n", "config", "p50", "p99", "p99.9",
        "p99.99", "max(med)", "max(max)", "p50x", "p99x", "p99.9x", "p9999x", "maxx", ">1ms: all blocked preempted oncpu"
      for (i = 1; i <= nc; i++) {
        cc = c[i]; n = 0; mm = 0
        for (f = 5; f <= 13; f++) sum[f] = 0
        for (f = 5; f <= 9; f++) m[f] = 0
        for (r in rounds) {
          if (!((r, cc, 5) in t)) continue
          n++
          if (t[r, cc, 9] > mm) mm = t[r, cc, 9]
          for (f = 10; f <= 13; f++) sum[f] += t[r, cc, f]
          for (f = 5; f <= 9; f++) {
            v[f, n] = t[r, cc, f]
            if ((r, "jemalloc", f) in t && t[r, "jemalloc", f] > 0) q[f, ++m[f]] = t[r, cc, f] / t[r, "jemalloc", f]
          }
        }
        if (n == 0) { printf "%-9s NA\n", cc; continue }
        line = sprintf("%-9s", cc)
        for (f = 5; f <= 9; f++) { delete a; for (k = 1; k <= n; k++) a[k] = v[f, k]; med[f] = median(a, n) }
        line = line sprintf(" %6.0f %6.0f %7.0f %7.0f %8.0f %9.0f ", med[5], med[6], med[7], med[8], med[9], mm)
        for (f = 5; f <= 9; f++) {
          delete a; for (k = 1; k <= m[f]; k++) a[k] = q[f, k]
          line = line sprintf(" %5.2fx", m[f] ? median(a, m[f]) : 0)
        }
        printf "%s  %4d %4d %4d %4d\n", line, sum[10], sum[11], sum[12], sum[13]
      }
    }' "$RESULTS"
done

# Issue 19's malloc targets, per round: d9's max within 2x jemalloc's, and no d9 run with
# a malloc above 1 ms spent in the call (blocked or on the CPU; preemption is the machine's).
awk -v configs="${CONFIGS[*]}" '
  $1 == "probe" && $4 == "malloc" { mx[$2, $3] = $9; own[$2, $3] = $11 + $13; rounds[$2] }
  END {
    nc = split(configs, c, " ")
    printf "\ntargets (malloc, per round): max <= 2x the same round'"'"'s jemalloc max; no op > 1 ms blocked or on-CPU\n"
    for (i = 1; i <= nc; i++) {
      if (c[i] == "jemalloc") continue
      n = 0; ok = 0; own_rounds = 0; worst = 0
      for (r in rounds) {
        if (!((r, c[i]) in mx) || !((r, "jemalloc") in mx)) continue
        n++; x = mx[r, c[i]] / mx[r, "jemalloc"]; if (x <= 2) ok++; if (x > worst) worst = x
        if (own[r, c[i]] > 0) own_rounds++
      }
      printf "%-9s max <= 2x jemalloc in %d of %d rounds (worst %.2fx); rounds with a blocked/on-CPU op > 1 ms: %d\n",
        c[i], ok, n, worst, own_rounds
    }
  }' "$RESULTS"

# The slowest calls: d9 runs (all above 200 us, at most 12) and jemalloc's (at most 4). A
# call that overlaps in time a slow call of another thread of the same run is marked: a
# process-wide cause (a lock, the mmap lock, every CPU taken) rather than the thread's own.
awk '{
    k = $1 " " $2; i = ++n[k]; line[k, i] = $0
    for (f = 3; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
    th[k, i] = v["thread"]; ns[k, i] = v["ns"]; t0[k, i] = v["t_ms"]; t1[k, i] = v["t_ms"] + v["ns"] / 1e6
  }
  END {
    for (k in n) for (i = 1; i <= n[k]; i++) {
      o = ""
      for (j = 1; j <= n[k]; j++)
        if (th[k, j] != th[k, i] && t0[k, j] < t1[k, i] && t0[k, i] < t1[k, j] && index("," o ",", "," th[k, j] ",") == 0)
          o = o (o == "" ? "" : ",") th[k, j]
      print ns[k, i], line[k, i] (o == "" ? "" : " overlaps_threads=" o)
    }
  }' "$STALLS" >"$STALLS.all"
echo
echo "slowest calls (ns; t_ms: since the start; thread_kib: bytes the thread had allocated before"
echo "the call; vcsw/ivcsw: voluntary/involuntary context switches around it; late=1: a thread"
echo "started mid-run; overlaps_threads: slow calls of other threads at the same time):"
for cfg in "${CONFIGS[@]}"; do
  [[ $cfg == jemalloc ]] && limit=4 || limit=12
  awk -v c="$cfg" '$2 == c && ($1 >= 200000 || c == "jemalloc")' "$STALLS.all" |
    sort -k1,1nr | head -"$limit" | cut -d' ' -f2- | sed 's/^\([^ ]*\) \([0-9]*\) /\1 round \2 /; s/^/  /'
done

# Blocked calls (the thread slept or waited in the call) among the slowest: those in a
# thread's first 5 ms are what a per-thread first-sample wait looks like.
awk -v configs="${CONFIGS[*]}" '{
    for (f = 3; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
    if (v["vcsw"] > 0 && v["ns"] >= 200000) {
      k = v["age_ms"] < 5 ? "early" : "later"; n[$2, k]++; if (v["ns"] > mx[$2, k]) mx[$2, k] = v["ns"]
    }
  }
  END {
    nc = split(configs, c, " ")
    printf "\nblocked calls >= 200 us among the slowest 8 per kind and run, all rounds (count, max ns):\n"
    for (i = 1; i <= nc; i++)
      printf "%-9s in a thread'"'"'s first 5 ms: %3d (max %8d)   later: %3d (max %8d)\n", c[i],
        n[c[i], "early"], mx[c[i], "early"], n[c[i], "later"], mx[c[i], "later"]
  }' "$STALLS.all"

if ((WITH_REDIS)); then
  for cmd in SET GET; do
    awk -v cmd="$cmd" -v configs="${CONFIGS[*]}" "$AWK_MEDIAN"'
      $1 == "redis" && $4 == cmd { for (f = 5; f <= 8; f++) t[$2, $3, f] = $f; rounds[$2] }
      END {
        nc = split(configs, c, " ")
        printf "\nredis %s latency (ms; redis-benchmark -c 50 -d 128). Medians over rounds; ratios: median of\n", cmd
        printf "per-round ratios to jemalloc (target: p99 <= 1.05x).\n"
        printf "%-9s %7s %7s %8s %8s %9s  %6s %6s %6s\n", "config", "p50", "p99", "max(med)", "max(max)", "req/s", "p50x", "p99x", "maxx"
        for (i = 1; i <= nc; i++) {
          cc = c[i]; n = 0; mm = 0
          for (f = 5; f <= 8; f++) m[f] = 0
          for (r in rounds) {
            if (!((r, cc, 5) in t)) continue
            n++; if (t[r, cc, 7] > mm) mm = t[r, cc, 7]
            for (f = 5; f <= 8; f++) {
              v[f, n] = t[r, cc, f]
              if ((r, "jemalloc", f) in t && t[r, "jemalloc", f] > 0) q[f, ++m[f]] = t[r, cc, f] / t[r, "jemalloc", f]
            }
          }
          if (n == 0) { printf "%-9s NA\n", cc; continue }
          for (f = 5; f <= 8; f++) { delete a; for (k = 1; k <= n; k++) a[k] = v[f, k]; med[f] = median(a, n) }
          line = sprintf("%-9s %7.3f %7.3f %8.3f %8.3f %9.0f ", cc, med[5], med[6], med[7], mm, med[8])
          for (f = 5; f <= 7; f++) {
            delete a; for (k = 1; k <= m[f]; k++) a[k] = q[f, k]
            rq[f] = m[f] ? median(a, m[f]) : 0
            line = line sprintf(" %5.2fx", rq[f])
          }
          if (cc != "jemalloc" && m[6]) line = line (rq[6] <= 1.05 ? "  p99 target met" : "  p99 target MISSED")
          print line
        }
      }' "$RESULTS"
  done
fi

echo
echo "# d9 allocation samples per run (trace written and counted with d9 summary --json):" \
  "$(awk '$1 == "probe" && $4 == "malloc" && $14 != "-" { s[$3] = s[$3] " " $14 }
    $1 == "redis" && $4 == "SET" && $9 != "-" { s[$3 " redis"] = s[$3 " redis"] " " $9 }
    END { for (k in s) printf "%s:%s; ", k, s[k] }' "$RESULTS" | sed 's/; $//')"
if ((FAILED)); then
  echo "# some runs FAILED; stderr shows how to reproduce them"
  exit 1
fi
