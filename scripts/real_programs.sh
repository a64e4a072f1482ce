#!/usr/bin/env bash
# Longer local form of tests/e2e_real_programs_test.cc: real programs run with and without
# libd9.so preloaded, their stdout (and exit code) must be identical (byte for byte, or once
# timings and addresses are taken out), the run without d9 must succeed, and every segment
# they wrote must decode (checked with the d9 CLI: `d9 summary`).
#
# Usage: scripts/real_programs.sh [scale]     scale multiplies the workloads (default 5)
#
# Environment: BUILD_DIR (default <repo>/build), NO_BUILD=1 (use the build as is),
# KEEP=1 (keep the work directory), RATES (sample rates to try, default "524288 4096 1"),
# ONLY (space-separated workload names to run, default all: python sqlite3 git bash
# python-regrtest redis nginx new-delete dlopen), BENCH_SECS (seconds of load per
# configuration in the redis and nginx throughput comparisons, default 20), BENCH_ROUNDS
# (interleaved rounds they are split into, default 4).
# Unsealed (.active) segments are counted, not failed: a process killed by a signal (SIGPIPE
# in the bash workload's `sort | head`) cannot seal. Processes that exec or end with
# _exit() (redis-server's BGSAVE child) seal first (see
# RealPrograms.ForkExecChildrenLeaveNoUnsealedSegments).
# Programs: /usr/bin/python3 (with Debian's libpython3.11-testsuite for python-regrtest),
# /usr/bin/sqlite3, /usr/bin/git, /bin/bash, redis-server/redis-cli/redis-benchmark,
# nginx/wrk/curl, and the suite's own test programs; a missing one is skipped with a note.
#
# The redis and nginx workloads run once per rate for correctness (the same data, digests
# and served bytes with and without d9, no errors, the servers' own processes profiled);
# then, at d9's defaults only, BENCH_SECS of load per configuration in interleaved rounds
# give the throughput ratio with d9 / without (median of the rounds' ratios).
# Exit status: 0 when every run matched, 1 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SCALE=${1:-5}
RATES=${RATES:-"524288 4096 1"}
ONLY=${ONLY:-"python sqlite3 git bash python-regrtest redis nginx new-delete dlopen"}
BENCH_SECS=${BENCH_SECS:-20}
BENCH_ROUNDS=${BENCH_ROUNDS:-4}
PROGRAMS=$BUILD_DIR/tests/programs
LIBD9=$BUILD_DIR/libd9.so
D9=$BUILD_DIR/d9

if [[ -z ${NO_BUILD:-} ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" >/dev/null
  make -C "$BUILD_DIR" -j"$(nproc)" d9 d9_cli new_delete_forms segments_subject segments_dso \
    >/dev/null
fi

unset LD_PRELOAD
while read -r var; do unset "$var"; done < <(compgen -e | grep '^D9_' || true)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/d9-real-programs.XXXXXX")
FAILED=0
# Servers the throughput rounds start (in subshells) note their pid here; any exit kills
# whichever still run. (The correctness sessions kill their own.)
SERVER_PIDS=$WORK/server-pids
cleanup() {
  local pid
  if [[ -f $SERVER_PIDS ]]; then
    while read -r pid; do
      if kill -0 "$pid" 2>/dev/null; then
        # nginx workers first (by parent pid), then the server itself.
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done <"$SERVER_PIDS"
  fi
  if [[ -z ${KEEP:-} ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

want() { [[ " $ONLY " == *" $1 "* ]]; }

# check NAME RATE CMD...: runs CMD plain and preloaded (in fresh sub-directories of $WORK
# given to CMD as $RUN_DIR), expects exit code 0 without d9, compares stdout and exit code,
# then decodes the segments.
check() {
  local name=$1 rate=$2
  shift 2
  local base="$WORK/$name-$rate"
  mkdir -p "$base/plain" "$base/d9" "$base/traces"
  local rc_plain=0 rc_d9=0 t0 t1 t2
  t0=$(date +%s.%N)
  (cd "$base/plain" && RUN_DIR=$base/plain "$@") >"$base/plain.out" 2>"$base/plain.err" || rc_plain=$?
  t1=$(date +%s.%N)
  (cd "$base/d9" && RUN_DIR=$base/d9 LD_PRELOAD=$LIBD9 D9_OUTPUT=$base/traces \
    D9_SAMPLE_RATE=$rate "$@") >"$base/d9.out" 2>"$base/d9.err" || rc_d9=$?
  t2=$(date +%s.%N)
  sed -i "s#$base/plain#<run>#g" "$base/plain.out"
  sed -i "s#$base/d9#<run>#g" "$base/d9.out"
  # CHECK_FILTER=SED (set for one check): what varies from run to run, taken out of both.
  if [[ -n ${CHECK_FILTER:-} ]]; then sed -i -e "$CHECK_FILTER" "$base/plain.out" "$base/d9.out"; fi
  local verdict=ok
  if [[ $rc_plain != 0 ]]; then
    verdict="failed without d9 (exit $rc_plain, see $base/plain.err)"
  elif [[ $rc_plain != "$rc_d9" ]]; then
    verdict="exit code $rc_plain without d9, $rc_d9 with"
  elif ! cmp -s "$base/plain.out" "$base/d9.out"; then
    verdict="stdout differs (diff $base/plain.out $base/d9.out)"
  elif grep -q '^d9: ' "$base/d9.err"; then
    verdict="d9 reported: $(grep '^d9: ' "$base/d9.err" | head -1)"
  fi
  local segs unsealed summary allocs
  segs=$(find "$base/traces" -type f | wc -l)
  unsealed=$(find "$base/traces" -type f -name '*.active' | wc -l)
  if [[ $segs -gt 0 ]]; then
    if ! summary=$("$D9" summary "$base/traces" 2>"$base/summary.err"); then
      [[ $verdict == ok ]] && verdict="d9 summary failed: $(head -1 "$base/summary.err")"
    elif grep -v '\.active: ' "$base/summary.err" | grep -q .; then
      # Errors in unsealed segments are expected (see above); in sealed ones they are not.
      [[ $verdict == ok ]] && verdict="decode error: $(grep -v '\.active: ' "$base/summary.err" | head -1)"
    fi
    allocs=$(printf '%s\n' "$summary" | sed -n 's/^allocation samples: \([0-9]*\).*/\1/p' | head -1)
    # CHECK_SITE=TEXT (set for one check): the allocation report must name this site.
    if [[ -n ${CHECK_SITE:-} && $verdict == ok ]] &&
      ! "$D9" alloc --top 1000 "$base/traces" 2>/dev/null | grep -qF -- "$CHECK_SITE"; then
      verdict="no allocation site $CHECK_SITE in d9 alloc"
    fi
  elif [[ -n ${CHECK_SITE:-} && $verdict == ok ]]; then
    verdict="no segments"
  fi
  printf '%-16s rate %-7s %6.2fs plain %6.2fs d9  %3d segment(s) (%d unsealed) %8s samples  %s\n' \
    "$name" "$rate" "$(elapsed "$t0" "$t1")" "$(elapsed "$t1" "$t2")" "$segs" "$unsealed" \
    "${allocs:-?}" "$verdict"
  if [[ $verdict != ok ]]; then
    FAILED=1
    KEEP=1
  fi
}

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

have() {
  if [[ -x $1 ]]; then return 0; fi
  echo "skipping: $1 is not installed"
  return 1
}

# ---- workloads ---------------------------------------------------------------------------

cat >"$WORK/churn.py" <<'EOF'
import sys, threading
ROUNDS = int(sys.argv[1])
def churn(rounds, width):
    total = 0
    for r in range(rounds):
        d = {"k%d_%d" % (r, i): [i, str(i) * 3, {"x": i}] for i in range(width)}
        values = sorted(v[1] for v in d.values())
        big = list(range(50000 + r)) * 2
        total += len(d) + len(values) + sum(big[::1000]) + len("".join(values[:2000]))
    return total
print("main", churn(ROUNDS, 20000))
results = [0] * 8
def work(n):
    results[n] = churn(max(1, ROUNDS // 4), 10000 + n)
threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("threads", results)
EOF

sqlite_script() {
  local rows=$1
  cat <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v INTEGER, pad TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $rows)
INSERT INTO t(k, v, pad) SELECT printf('key-%09d', (x * 7919) % 10000019), x % 1000,
  substr(printf('%.40d', x), 1, 20 + x % 20) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(v), min(k), max(k) FROM t;
SELECT v % 10, count(*), sum(length(pad)) FROM t GROUP BY v % 10 ORDER BY 1;
SELECT k, v FROM t ORDER BY pad DESC, k LIMIT 5;
CREATE TABLE u AS SELECT k, group_concat(v) AS vs FROM t GROUP BY substr(k, 1, 10);
SELECT count(*), sum(length(vs)) FROM u;
DELETE FROM t WHERE v < 500;
SELECT count(*), total(v) FROM t;
EOF
}

git_session() {  # runs in $RUN_DIR; FILES files
  local files=$1 repo=$RUN_DIR/repo
  export HOME=$RUN_DIR GIT_CONFIG_NOSYSTEM=1 GIT_PAGER=cat LC_ALL=C TZ=UTC \
    GIT_AUTHOR_NAME="d9 test" GIT_AUTHOR_EMAIL=d9@example.com \
    GIT_COMMITTER_NAME="d9 test" GIT_COMMITTER_EMAIL=d9@example.com \
    GIT_AUTHOR_DATE=2024-01-01T00:00:00Z GIT_COMMITTER_DATE=2024-01-01T00:00:00Z
  # Generated with awk before git runs (awk is preloaded too, which is fine).
  for ((i = 0; i < 20; i++)); do mkdir -p "$repo/d$i"; done
  awk -v n="$files" -v dir="$repo" 'BEGIN {
    for (i = 0; i < n; i++) {
      f = dir "/d" (i % 20) "/f" i ".txt"
      for (j = 0; j < 200; j++) printf "file %d line %d %s\n", i, j, substr("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 1, j % 50) > f
      close(f)
    } }'
  local g=(/usr/bin/git -C "$repo")
  "${g[@]}" -c init.defaultBranch=main init
  "${g[@]}" add -A
  "${g[@]}" commit -q -m first
  for ((i = 0; i < files / 4; i++)); do echo "appended $i" >>"$repo/d$((i % 20))/f$i.txt"; done
  "${g[@]}" add -A
  "${g[@]}" commit -m second
  "${g[@]}" log --stat | tail -20
  "${g[@]}" diff HEAD~1 | sha256sum
  "${g[@]}" gc -q
  "${g[@]}" status
}

bash_script() {
  local n=$1
  cat <<EOF
set -o pipefail
seq 1 $((n * 40000)) | sort -r | head -3
seq 1 $((n * 20000)) | awk '{ s += \$1 * \$1 } END { print s }'
x=; for i in \$(seq 1 $((n * 600))); do x="\$x\$i,"; done; echo \${#x}
declare -A m; for i in \$(seq 1 $((n * 1000))); do m[k\$i]=\$i; done; echo \${#m[@]}
seq 1 $((n * 4000)) | sed 's/^/w/' | sort | uniq -c | wc -l
echo done
EOF
}

# CPython's own regression tests (`python3 -m test`, one process), compared on regrtest's
# output without timings and on every test case's outcome from its JUnit XML.
REGRTEST_SLICE="test_dict test_list test_set test_json test_re test_unicode test_bytes
  test_collections test_heapq test_bisect test_deque test_tuple test_sort test_string
  test_textwrap test_difflib test_pickle test_array test_itertools test_functools
  test_ordered_dict test_userdict test_userlist test_enum test_dataclasses test_statistics
  test_fractions test_decimal test_struct test_base64 test_binascii test_zlib test_csv
  test_copy test_weakref test_gc test_long test_float test_int test_format test_class
  test_contains test_scope test_generators test_types"

python_regrtest() { # runs in $RUN_DIR; the test modules as arguments
  local rc=0
  PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 HOME=$RUN_DIR TMPDIR=$RUN_DIR LC_ALL=C.UTF-8 \
    /usr/bin/python3 -m test --junit-xml "$RUN_DIR/junit.xml" "$@" >"$RUN_DIR/regrtest.out" \
    2>&1 || rc=$?
  # The reports are read without d9: they are not part of the workload.
  env -u LD_PRELOAD sed -E -e 's/^[0-9]+:[0-9]{2}:[0-9]{2} (load avg: [0-9.]+ )?//' \
    -e '/^== cwd:/d' -e '/^Total duration:/d' -e 's/[0-9]+(\.[0-9]+)? ?(ms|sec|min)\b/<time>/g' \
    "$RUN_DIR/regrtest.out"
  env -u LD_PRELOAD /usr/bin/python3 -c '
import sys, xml.etree.ElementTree as ET
cases = []
for case in ET.parse(sys.argv[1]).iter("testcase"):
    outcome = "ok"
    for child in case:
        if child.tag in ("skipped", "failure", "error"):
            outcome = child.tag
    cases.append(case.get("name") + " " + outcome)
print(len(cases), "test cases")
print("\n".join(sorted(cases)))' "$RUN_DIR/junit.xml"
  return $rc
}

# A TCP port on 127.0.0.1 that nothing listens on, below the kernel's range of ephemeral
# ports (which clients' sockets take: the load generators open hundreds). The server may
# still lose a race for it: callers retry.
free_port() {
  local low port
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  ((low > 12000)) || low=32768
  for _ in {1..100}; do
    port=$((10000 + RANDOM % (low - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# redis-server under redis-benchmark: a deterministic data set, a benchmark of N requests
# per test, the exact INCR and LPUSH totals, INFO, a BGSAVE checked by redis-check-rdb, and
# a restart on the saved file. The session itself runs without d9 (`env -u LD_PRELOAD`):
# in the d9 run (D9_OUTPUT set) only the server is preloaded, with LIBD9.
redis_session() { # runs in $RUN_DIR; N LIBD9
  local n=$1 port pid info digest dbsize server=()
  if [[ -n ${D9_OUTPUT:-} ]]; then server=(env "LD_PRELOAD=$2"); fi
  trap '[[ -n ${pid:-} ]] && kill -KILL "$pid" 2>/dev/null' EXIT
  redis_start() {
    for _ in 1 2 3; do
      port=$(free_port) || return 1
      "${server[@]}" /usr/bin/redis-server --port "$port" --bind 127.0.0.1 --save '' \
        --appendonly no --dir "$RUN_DIR" --daemonize no --enable-debug-command local \
        --logfile "$RUN_DIR/redis.log" &
      pid=$!
      for _ in {1..300}; do
        [[ $(/usr/bin/redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
      done
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    done
    echo "redis-server did not start"
    return 1
  }
  redis_stop() { # SHUTDOWN NOSAVE; checks the server was profiled when it should be
    /usr/bin/redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
    local rc=0
    wait "$pid" || rc=$?
    echo "server exit $rc"
    if [[ -n ${D9_OUTPUT:-} ]] && ! compgen -G "$D9_OUTPUT/*-$pid/trace.*" >/dev/null; then
      echo "redis-server $pid left no segment" >&2
      exit 3
    fi
    pid=
  }
  r() { /usr/bin/redis-cli -p "$port" "$@"; }
  field() { printf '%s\n' "$info" | tr -d '\r' | sed -n "s/^$1://p"; }
  redis_start || return 1
  echo "load $(r EVAL "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'key:' .. i, string.rep('v', i % 200)); redis.call('RPUSH', 'list:' .. (i % 10), i); redis.call('HSET', 'hash:' .. (i % 50), 'f' .. i, i * 3); redis.call('ZADD', 'zset', i % 977, 'm' .. i); redis.call('SADD', 'set:' .. (i % 7), i % 1000) end return redis.call('DBSIZE')" 0 $((n / 2)))"
  local q
  for q in "DBSIZE" "STRLEN key:1234" "LLEN list:3" "LRANGE list:3 0 4" "HLEN hash:7" \
    "ZRANGE zset 0 4 WITHSCORES" "SCARD set:3" "DEBUG DIGEST"; do
    # shellcheck disable=SC2086  # the query's words are separate arguments
    echo "$q: $(r $q | tr '\n' ' ')"
  done
  /usr/bin/redis-benchmark -p "$port" -n "$n" -c 20 -r 10000 -d 64 \
    -t set,get,incr,lpush,rpop,sadd,hset,spop,zadd,lrange_100 --csv >"$RUN_DIR/bench.csv" \
    2>"$RUN_DIR/bench.err" || echo "redis-benchmark failed"
  echo "benchmark results $(grep -c '^"[A-Z]' "$RUN_DIR/bench.csv"), error lines $(grep -ci err "$RUN_DIR/bench.err")"
  echo "counters $(r EVAL "local s = 0 for _, k in ipairs(redis.call('KEYS', 'counter:*')) do s = s + tonumber(redis.call('GET', k)) end return s" 0)"
  echo "llen mylist $(r LLEN mylist)"
  info=$(r INFO all)
  echo "error replies $(field total_error_replies), rejected $(field rejected_connections)"
  (($(field total_commands_processed) >= 11 * n)) && echo "commands processed: all"
  (($(field allocator_allocated) > 1000000)) && echo "allocator statistics: present"
  r BGSAVE
  for _ in {1..1200}; do
    info=$(r INFO persistence)
    [[ $(field rdb_bgsave_in_progress) == 0 ]] && break
    sleep 0.05
  done
  echo "bgsave $(field rdb_last_bgsave_status)"
  /usr/bin/redis-check-rdb "$RUN_DIR/dump.rdb" | grep -o 'RDB looks OK' || echo "bad RDB"
  digest=$(r DEBUG DIGEST)
  dbsize=$(r DBSIZE)
  redis_stop
  redis_start || return 1
  if [[ $(r DBSIZE) == "$dbsize" && $(r DEBUG DIGEST) == "$digest" ]]; then
    echo "reloaded: same data"
  else
    echo "reloaded: different data"
  fi
  redis_stop
}

# nginx configuration: a non-daemon master with 2 workers serving ROOT/www on PORT.
nginx_conf() { # ROOT PORT
  local user=
  # As root, nginx switches the workers to `nobody`, as in production: d9 hands each
  # worker's output directory over to it. The work directory must let it through.
  if [[ $(id -u) == 0 ]]; then
    user="user nobody nogroup;"
    chmod o+x "$1" "$1/.." "$1/../.."  # ROOT is $WORK/NAME-RATE/{plain,d9}
  fi
  cat <<EOF
$user
daemon off;
master_process on;
worker_processes 2;
pid $1/nginx.pid;
error_log $1/error.log notice;
env LD_PRELOAD;
env D9_OUTPUT;
env D9_SAMPLE_RATE;
events { worker_connections 1024; }
http {
  types { text/plain txt; }
  default_type application/octet-stream;
  log_format brief '\$status \$body_bytes_sent';
  access_log $1/access.log brief buffer=64k flush=1s;
  gzip on;
  gzip_types text/plain;
  client_body_temp_path $1/tmp_body;
  proxy_temp_path $1/tmp_proxy;
  fastcgi_temp_path $1/tmp_fastcgi;
  uwsgi_temp_path $1/tmp_uwsgi;
  scgi_temp_path $1/tmp_scgi;
  server {
    listen 127.0.0.1:$2;
    root $1/www;
  }
}
EOF
}

# ROOT/www: deterministic text that compresses and bytes that do not; ROOT/requests.lua
# makes wrk alternate between the gzip'd page and the blob.
nginx_files() { # ROOT
  mkdir -p "$1/www"
  LC_ALL=C awk 'BEGIN { for (i = 0; i < 1200; i++) printf "line %d: the quick brown fox %d jumps over the lazy dog\n", i, (i * 7919) % 1000 }' >"$1/www/page.txt"
  LC_ALL=C awk 'BEGIN { x = 12345; for (i = 0; i < 196608; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%c", int(x / 65536) % 256 } }' >"$1/www/blob.bin"
  cat >"$1/requests.lua" <<'EOF'
local n = 0
request = function()
  n = n + 1
  if n % 2 == 0 then return wrk.format("GET", "/blob.bin") end
  return wrk.format("GET", "/page.txt", {["Accept-Encoding"] = "gzip"})
end
EOF
}

# nginx: the bytes served (plain and gzip'd) by checksum, then wrk for SECS seconds: no
# non-2xx response or socket error, every request logged 200, a clean graceful stop. The
# session runs without d9; in the d9 run (D9_OUTPUT set) nginx is preloaded with LIBD9,
# and every worker must have left segments (the master, which only reads its configuration,
# may sample nothing at the default rate).
nginx_session() { # runs in $RUN_DIR; SECS of wrk, LIBD9
  local secs=$1 port pid workers server=()
  if [[ -n ${D9_OUTPUT:-} ]]; then server=(env "LD_PRELOAD=$2"); fi
  trap '[[ -n ${pid:-} ]] && { pkill -KILL -P "$pid"; kill -KILL "$pid"; } 2>/dev/null' EXIT
  nginx_files "$RUN_DIR"
  for _ in 1 2 3; do
    port=$(free_port) || return 1
    nginx_conf "$RUN_DIR" "$port" >"$RUN_DIR/nginx.conf"
    "${server[@]}" /usr/sbin/nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" \
      -e "$RUN_DIR/error.log" &
    pid=$!
    for _ in {1..300}; do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null && break
    wait "$pid" 2>/dev/null
    pid=
  done
  [[ -n $pid ]] || {
    echo "nginx did not start"
    return 1
  }
  for _ in {1..100}; do
    workers=$(pgrep -P "$pid" | sort | tr '\n' ' ')
    [[ $(wc -w <<<"$workers") -ge 2 ]] && break
    sleep 0.05
  done
  echo "workers $(wc -w <<<"$workers")"
  local url=http://127.0.0.1:$port
  echo "page.txt $(curl -s "$url/page.txt" | sha256sum | cut -c1-16)" \
    "(file $(sha256sum <"$RUN_DIR/www/page.txt" | cut -c1-16))"
  echo "page.txt gzip'd $(curl -s -H 'Accept-Encoding: gzip' "$url/page.txt" |
    sha256sum | cut -c1-16)"
  echo "blob.bin $(curl -s -H 'Accept-Encoding: gzip' "$url/blob.bin" |
    sha256sum | cut -c1-16) (file $(sha256sum <"$RUN_DIR/www/blob.bin" | cut -c1-16))"
  /usr/bin/wrk -t1 -c16 -d"${secs}s" -s "$RUN_DIR/requests.lua" "$url/" \
    >"$RUN_DIR/wrk.out" 2>&1
  grep -E 'Non-2xx|Socket errors' "$RUN_DIR/wrk.out" || echo "wrk: no errors"
  local requests rc=0
  requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$RUN_DIR/wrk.out")
  kill -QUIT "$pid"
  wait "$pid" || rc=$?
  echo "nginx exit $rc"
  awk -v want="${requests:-1}" '{ n++; if ($1 != 200) bad++ }
    END { printf "access log: %s, %d not 200\n", (n >= want ? "every request" : "requests missing"), bad }' \
    "$RUN_DIR/access.log"
  if [[ -n ${D9_OUTPUT:-} ]]; then
    local w
    for w in $workers; do
      if ! compgen -G "$D9_OUTPUT/*-$w/trace.*" >/dev/null; then
        echo "nginx process $w left no segment" >&2
        exit 3
      fi
    done
  fi
  pid=
}

# ---- throughput: interleaved rounds at d9's defaults ---------------------------------------

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# redis_round MODE N: one server (preloaded for MODE d9), redis-benchmark with N requests
# per test; prints the geometric mean of the tests' requests/s. Fails on any error.
redis_round() {
  local mode=$1 n=$2 dir port pid preload=() up=
  dir=$(mktemp -d "$WORK/redis-bench.XXXX")
  if [[ $mode == d9 ]]; then preload=(env LD_PRELOAD="$LIBD9" D9_OUTPUT="$WORK/bench-traces"); fi
  for _ in 1 2 3; do
    port=$(free_port)
    "${preload[@]}" /usr/bin/redis-server --port "$port" --bind 127.0.0.1 --save '' \
      --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
    pid=$!
    echo "$pid" >>"$SERVER_PIDS"
    for _ in {1..300}; do
      [[ $(/usr/bin/redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && up=1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    [[ -n $up ]] && break
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [[ -z $up ]]; then
    echo "redis $mode round: the server did not start: $(tail -1 "$dir/redis.log")" >&2
    return 1
  fi
  /usr/bin/redis-benchmark -p "$port" -n "$n" -c 20 -r 10000 -d 64 \
    -t set,get,incr,lpush,rpop,sadd,hset,spop,zadd,lrange_100 --csv >"$dir/bench.csv" \
    2>"$dir/bench.err" || echo "redis-benchmark failed" >>"$dir/bench.err"
  local errors
  errors=$(/usr/bin/redis-cli -p "$port" INFO stats | tr -d '\r' | sed -n 's/^total_error_replies://p')
  /usr/bin/redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  wait "$pid" || errors="server exit $?"
  if [[ -s $dir/bench.err || $errors != 0 || $(grep -c '^"[A-Z]' "$dir/bench.csv") != 11 ]]; then
    echo "redis $mode round failed: $(cat "$dir/bench.err") errors=$errors" >&2
    return 1
  fi
  awk -F'","' '/^"[A-Z]/ { s += log($2); n++ } END { printf "%.0f\n", exp(s / n) }' "$dir/bench.csv"
}

# nginx_round MODE SECS: prints wrk's requests/s; fails on any non-2xx or socket error.
nginx_round() {
  local mode=$1 secs=$2 dir port pid preload=() up=
  dir=$(mktemp -d "$WORK/nginx-bench.XXXX")
  nginx_files "$dir"
  if [[ $mode == d9 ]]; then preload=(env LD_PRELOAD="$LIBD9" D9_OUTPUT="$WORK/bench-traces"); fi
  for _ in 1 2 3; do
    port=$(free_port)
    nginx_conf "$dir" "$port" >"$dir/nginx.conf"
    "${preload[@]}" /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
      2>>"$dir/nginx.err" &
    pid=$!
    echo "$pid" >>"$SERVER_PIDS"
    for _ in {1..300}; do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && up=1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    [[ -n $up ]] && break
    wait "$pid" 2>/dev/null  # it gave up on the port
  done
  if [[ -z $up ]]; then
    echo "nginx $mode round: the server did not start: $(tail -1 "$dir/nginx.err")" >&2
    return 1
  fi
  /usr/bin/wrk -t1 -c16 -d"${secs}s" -s "$dir/requests.lua" "http://127.0.0.1:$port/" \
    >"$dir/wrk.out" 2>&1
  kill -QUIT "$pid"
  wait "$pid" || echo "nginx exit $?" >>"$dir/wrk.out"
  if grep -qE 'Non-2xx|Socket errors|nginx exit' "$dir/wrk.out"; then
    echo "nginx $mode round failed: $(grep -E 'Non-2xx|Socket errors|nginx exit' "$dir/wrk.out")" >&2
    return 1
  fi
  sed -n 's/^Requests\/sec: *//p' "$dir/wrk.out"
}

# throughput NAME ROUND_FN ARG: BENCH_ROUNDS rounds of ROUND_FN plain|d9 ARG, alternating
# which configuration goes first; prints each round and the medians.
throughput() {
  local name=$1 fn=$2 arg=$3 i plain d9 ratios=() plains=() d9s=()
  for ((i = 0; i < BENCH_ROUNDS; i++)); do
    if ((i % 2 == 0)); then
      plain=$($fn plain "$arg") && d9=$($fn d9 "$arg")
    else
      d9=$($fn d9 "$arg") && plain=$($fn plain "$arg")
    fi || {
      echo "$name: round $((i + 1)) failed"
      FAILED=1
      KEEP=1
      return
    }
    plains+=("$plain")
    d9s+=("$d9")
    ratios+=("$(awk -v a="$d9" -v b="$plain" 'BEGIN { printf "%.3f", a / b }')")
    printf '%-16s round %d: %10.0f req/s without d9 %10.0f with d9  ratio %s\n' "$name" \
      "$((i + 1))" "$plain" "$d9" "${ratios[-1]}"
  done
  printf '%-16s median:  %10.0f req/s without d9 %10.0f with d9  ratio %s (d9 defaults)\n' \
    "$name" "$(printf '%s\n' "${plains[@]}" | median)" "$(printf '%s\n' "${d9s[@]}" | median)" \
    "$(printf '%s\n' "${ratios[@]}" | median)"
}

# ---- runs ----------------------------------------------------------------------------------

for rate in $RATES; do
  if want python && have /usr/bin/python3; then
    check python-pymalloc "$rate" /usr/bin/python3 -s "$WORK/churn.py" $((SCALE * 5))
    check python-malloc "$rate" env PYTHONMALLOC=malloc /usr/bin/python3 -s "$WORK/churn.py" \
      $((SCALE * 2))
  fi
  if want sqlite3 && have /usr/bin/sqlite3; then
    check sqlite3 "$rate" env HOME="$WORK" /usr/bin/sqlite3 -batch :memory: \
      "$(sqlite_script $((SCALE * 200000)))"
  fi
  if want git && have /usr/bin/git; then
    check git "$rate" /bin/bash -c "$(declare -f git_session); git_session $((SCALE * 200))"
  fi
  if want bash && have /bin/bash; then
    check bash "$rate" /bin/bash -c "$(bash_script "$SCALE")"
  fi
  if want python-regrtest && have /usr/bin/python3; then
    if /usr/bin/python3 -c 'import test.libregrtest, test.test_dict' 2>/dev/null; then
      check python-regrtest "$rate" /bin/bash -c \
        "$(declare -f python_regrtest); python_regrtest $(echo $REGRTEST_SLICE)"
    else
      echo "skipping: CPython's test suite (Debian: libpython3.11-testsuite) is not installed"
    fi
  fi
  if want redis && have /usr/bin/redis-server && have /usr/bin/redis-benchmark &&
    have /usr/bin/redis-cli && have /usr/bin/redis-check-rdb; then
    check redis "$rate" env -u LD_PRELOAD /bin/bash -c \
      "$(declare -f free_port redis_session); redis_session $((SCALE * 10000)) '$LIBD9'"
  fi
  if want nginx && have /usr/sbin/nginx && have /usr/bin/wrk && have /usr/bin/curl; then
    check nginx "$rate" env -u LD_PRELOAD /bin/bash -c \
      "$(declare -f free_port nginx_conf nginx_files nginx_session)
       nginx_session $((SCALE < 5 ? SCALE : 5)) '$LIBD9'"
  fi
  if want new-delete && have "$PROGRAMS/new_delete_forms"; then
    # Site addresses change from run to run: only the forms and the checksum are compared.
    CHECK_FILTER='/^site /d' CHECK_SITE=site_plain check new-delete "$rate" \
      "$PROGRAMS/new_delete_forms" $((SCALE < 10 ? SCALE * 10000 : 100000)) 10
  fi
  if want dlopen && have "$PROGRAMS/segments_subject"; then
    # How many load addresses the library had depends on the address space.
    CHECK_FILTER='/^dlopen-loop load addresses/d' CHECK_SITE="segdso::dso_alloc" \
      check dlopen-loop "$rate" "$PROGRAMS/segments_subject" dlopen-loop \
      "$PROGRAMS/libsegments_dso.so" $((SCALE * 200)) 20
  fi
done

# Throughput at d9's defaults: BENCH_SECS of load per configuration.
if want redis && have /usr/bin/redis-server && have /usr/bin/redis-benchmark; then
  # Requests per test for rounds of BENCH_SECS / BENCH_ROUNDS seconds, from a short run.
  t0=$(date +%s.%N)
  redis_round plain 20000 >/dev/null || FAILED=1
  t1=$(date +%s.%N)
  n=$(awk -v t="$(elapsed "$t0" "$t1")" -v s="$BENCH_SECS" -v r="$BENCH_ROUNDS" \
    'BEGIN { n = 20000 * s / r / t; print (n < 10000 ? 10000 : int(n)) }')
  throughput redis-benchmark redis_round "$n"
fi
if want nginx && have /usr/sbin/nginx && have /usr/bin/wrk; then
  throughput nginx-wrk nginx_round $((BENCH_SECS / BENCH_ROUNDS > 1 ? BENCH_SECS / BENCH_ROUNDS : 1))
fi
if [[ -d $WORK/bench-traces ]]; then
  # What the servers wrote during the throughput rounds decodes too.
  if ! "$D9" summary "$WORK/bench-traces" >/dev/null 2>"$WORK/bench-summary.err" ||
    grep -v '\.active: ' "$WORK/bench-summary.err" | grep -q .; then
    echo "throughput runs: decode error: $(head -1 "$WORK/bench-summary.err")"
    FAILED=1
    KEEP=1
  fi
fi

if [[ $FAILED != 0 ]]; then
  echo "FAILED; work directory kept: $WORK"
  exit 1
fi
echo "all runs matched"
