#!/usr/bin/env bash
# Cost of shipping segments to S3 for the profiled program, and upload throughput. Prints
# figures; not a test.
#
# Usage: scripts/bench_ship.sh [rounds]   interleaved rounds (default 7, +1 warm-up discarded)
#
# Configurations, both with libd9.so preloaded and D9_ROTATE_SECS=1 (a seal, and with S3 an
# upload, every second, so the upload thread works while the program runs):
#   local   segments stay on disk (D9_S3_BUCKET unset)
#   s3      D9_S3_BUCKET set: each sealed segment is transcoded to gzip and uploaded to an
#           s3rver on 127.0.0.1 (scripts/s3rver.sh), then deleted
# Workloads:
#   alloc_loop  bench/alloc_loop.c, ALLOC_N ops: in-program wall and process CPU (all
#               threads, d9's upload thread included) per op, and the run's wall clock from
#               outside (exit included: the last segment is shipped before the process ends)
#   redis       redis-server preloaded, redis-benchmark -n REDIS_N -t set,get -P 16: requests/s,
#               and the server's CPU seconds (utime + stime from /proc) per run
# Ratios are s3 / local per round, then the median. Then upload throughput: `d9 ship` of
# the segments a run left on disk (zstd -> gzip transcode, MD5, PUT), bytes per second.
#
# Environment: BUILD_DIR (default <repo>/build), ALLOC_N (default 400000000), REDIS_N
# (default 3000000).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ALLOC_N=${ALLOC_N:-400000000}
REDIS_N=${REDIS_N:-3000000}
ROUNDS=${1:-7}
LIBD9=$BUILD_DIR/libd9.so
D9=$BUILD_DIR/d9
for f in "$LIBD9" "$BUILD_DIR/libd9_ship.so" "$D9" "$BUILD_DIR/bench/alloc_loop"; do
  [[ -e $f ]] || { echo "missing $f: BUILD_DIR=$BUILD_DIR bash scripts/build.sh" >&2; exit 1; }
done
bash "$ROOT/scripts/s3rver.sh"

echo "# command: ${0#"$ROOT"/} $*  (ALLOC_N=$ALLOC_N REDIS_N=$REDIS_N)"
echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "# host:    $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(uname -sr)"
echo "# d9:      $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"

WORK=$(mktemp -d)
S3_PORT=$((20000 + RANDOM % 20000))
REDIS_PORT=$((40000 + RANDOM % 20000))
node "$ROOT/tests/s3/node_modules/s3rver/bin/s3rver.js" -d "$WORK/s3" -a 127.0.0.1 \
  -p "$S3_PORT" --configure-bucket bench --silent >"$WORK/s3rver.log" 2>&1 &
S3_PID=$!
trap 'kill $S3_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for ((i = 0; i < 100; i++)); do
  (exec 3<>/dev/tcp/127.0.0.1/$S3_PORT) 2>/dev/null && break
  sleep 0.1
done
S3_ENV=(AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  D9_S3_ENDPOINT=http://127.0.0.1:$S3_PORT D9_HOST=bench)

cmd_env() {
  echo "LD_PRELOAD=$LIBD9"
  echo "D9_OUTPUT=$WORK/out"
  echo "D9_ROTATE_SECS=1"
  if [[ $1 == s3 ]]; then
    printf '%s\n' "${S3_ENV[@]}" D9_S3_BUCKET=bench D9_S3_PREFIX=run D9_S3_EXIT_TIMEOUT=30
  fi
}

now() { date +%s%N; }

# alloc CONFIG: "<wall ns/op> <cpu ns/op> <outside wall s>"
alloc() {
  local -a envs
  mapfile -t envs < <(cmd_env "$1")
  local t0 t1 out
  t0=$(now)
  out=$(env -i "${envs[@]}" "$BUILD_DIR/bench/alloc_loop" "$ALLOC_N" 2>>"$WORK/log")
  t1=$(now)
  out=${out#ns_per_op=}
  echo "${out/ cpu_ns_per_op=/ } $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')"
}

# redis CONFIG: "<requests/s> <server CPU s>"
redis() {
  local -a envs
  mapfile -t envs < <(cmd_env "$1")
  env -i "${envs[@]}" /usr/bin/redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
    --appendonly no --daemonize no --logfile '' >>"$WORK/log" 2>&1 &
  local pid=$! i out cpu
  for ((i = 0; i < 100; i++)); do
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  out=$(redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -q -n "$REDIS_N" -t set,get -P 16 2>>"$WORK/log" | tr '\r' '\n') || true
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$pid/stat")
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$out" | awk -v cpu="$cpu" '/^(SET|GET): .* requests per second/ { n++; t += 1 / $2 }
    END { if (n == 2) printf "%.0f %s\n", 2 / t, cpu; else print "NA", cpu }'
}

RESULTS=$WORK/results
: >"$RESULTS"
CONFIGS=(local s3)
echo "# rounds:  $ROUNDS (+1 warm-up discarded), the order of local and s3 alternates"
for ((r = 0; r <= ROUNDS; r++)); do
  for ((k = 0; k < 2; k++)); do
    cfg=${CONFIGS[(r + k) % 2]}
    a=$(alloc "$cfg")
    rm -rf "$WORK/out"
    b=$(redis "$cfg")
    rm -rf "$WORK/out"
    ((r > 0)) && echo "$r $cfg $a $b" >>"$RESULTS"
  done
  printf '# round %d/%d done\r' "$r" "$ROUNDS" >&2
done
echo >&2

# Columns of RESULTS: round cfg wall_ns cpu_ns outside_s rps redis_cpu_s
awk '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { for (c = 3; c <= 7; c++) v[$1, $2, c] = $c; rounds[$1] }
  END {
    split("wall ns/op (in program)|process CPU ns/op|wall s (outside, exit included)|redis requests/s|redis-server CPU s", names, "|")
    printf "\n| %-34s | %12s | %12s | %14s |\n", "figure", "local", "s3", "s3/local"
    printf "|%s|%s|%s|%s|\n", "------------------------------------", "--------------", "--------------", "----------------"
    for (c = 3; c <= 7; c++) {
      n = 0
      for (r in rounds) {
        if (v[r, "local", c] == "NA" || v[r, "s3", c] == "NA") continue
        n++; L[n] = v[r, "local", c]; S[n] = v[r, "s3", c]; R[n] = v[r, "s3", c] / v[r, "local", c]
      }
      printf "| %-34s | %12.3f | %12.3f | %13.4fx |\n", names[c - 2], median(L, n), median(S, n), median(R, n)
    }
    print "\n# medians over rounds; the ratio is the median of per-round ratios. For requests/s,"
    print "# < 1x is slower; for the rest, > 1x is more."
  }' "$RESULTS"

# --- upload throughput: d9 ship of segments left on disk --------------------------------
env -i LD_PRELOAD="$LIBD9" D9_OUTPUT="$WORK/ship" D9_ROTATE_SECS=1 D9_SAMPLE_RATE=16K \
  "$BUILD_DIR/bench/alloc_loop" "$ALLOC_N" >/dev/null 2>>"$WORK/log"
files=$(find "$WORK/ship" -name 'trace.*.bin.zst' | wc -l)
disk=$(find "$WORK/ship" -name 'trace.*.bin.zst' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
t0=$(now)
env "${S3_ENV[@]}" "$D9" ship "$WORK/ship" s3://bench/ship >"$WORK/ship.out" 2>>"$WORK/log"
t1=$(now)
sent=$(sed -n 's/.*(\([0-9]*\) bytes)$/\1/p' "$WORK/ship.out" | awk '{ s += $1 } END { print s + 0 }')
awk -v f="$files" -v d="$disk" -v s="$sent" -v t0="$t0" -v t1="$t1" 'BEGIN {
  secs = (t1 - t0) / 1e9
  printf "\nupload: d9 ship of %d segments (D9_SAMPLE_RATE=16K, 1 s each): %.1f MB zstd on disk -> %.1f MB gzip sent in %.2f s: %.1f MB/s sent, %.1f segments/s (one connection, s3rver on 127.0.0.1)\n", f, d / 1e6, s / 1e6, secs, s / 1e6 / secs, f / secs
}'
