#!/usr/bin/env bash
# Longer local form of tests/e2e_real_programs_test.cc: real programs run with and without
# libd9.so preloaded, their stdout (and exit code) must be identical byte for byte, and
# every segment they wrote must decode (checked with the d9 CLI: `d9 summary`).
#
# Usage: scripts/real_programs.sh [scale]     scale multiplies the workloads (default 5)
#
# Environment: BUILD_DIR (default <repo>/build), NO_BUILD=1 (use the build as is),
# KEEP=1 (keep the work directory), RATES (sample rates to try, default "524288 4096 1").
# Unsealed (.active) segments are counted, not failed: a process killed by SIGPIPE (the
# bash workload's `sort | head`) cannot seal, and fork children that exec may leave one
# (see RealPrograms.ForkExecChildrenLeaveNoUnsealedSegments).
# Programs: /usr/bin/python3, /usr/bin/sqlite3, /usr/bin/git, /bin/bash; a missing one is
# skipped with a note. Exit status: 0 when every run matched, 1 otherwise.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SCALE=${1:-5}
RATES=${RATES:-"524288 4096 1"}
LIBD9=$BUILD_DIR/libd9.so
D9=$BUILD_DIR/d9

if [[ -z ${NO_BUILD:-} ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" >/dev/null
  make -C "$BUILD_DIR" -j"$(nproc)" d9 d9_cli >/dev/null
fi

unset LD_PRELOAD
while read -r var; do unset "$var"; done < <(compgen -e | grep '^D9_' || true)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/d9-real-programs.XXXXXX")
if [[ -z ${KEEP:-} ]]; then trap 'rm -rf "$WORK"' EXIT; fi
FAILED=0

# check NAME RATE CMD...: runs CMD plain and preloaded (in fresh sub-directories of $WORK
# given to CMD as $RUN_DIR), compares stdout and exit code, then decodes the segments.
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
  local verdict=ok
  if [[ $rc_plain != "$rc_d9" ]]; then
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
    allocs=$(printf '%s\n' "$summary" | grep -m1 -o '[0-9]* allocation samples' | cut -d' ' -f1 || true)
  fi
  printf '%-16s rate %-7s %6.2fs plain %6.2fs d9  %3d segment(s) (%d unsealed) %8s samples  %s\n' \
    "$name" "$rate" "$(elapsed "$t0" "$t1")" "$(elapsed "$t1" "$t2")" "$segs" "$unsealed" \
    "${allocs:-?}" "$verdict"
  if [[ $verdict != ok ]]; then
    FAILED=1
    KEEP=1
    trap - EXIT
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

# ---- runs ----------------------------------------------------------------------------------

for rate in $RATES; do
  if have /usr/bin/python3; then
    check python-pymalloc "$rate" /usr/bin/python3 -s "$WORK/churn.py" $((SCALE * 5))
    check python-malloc "$rate" env PYTHONMALLOC=malloc /usr/bin/python3 -s "$WORK/churn.py" \
      $((SCALE * 2))
  fi
  if have /usr/bin/sqlite3; then
    check sqlite3 "$rate" env HOME="$WORK" /usr/bin/sqlite3 -batch :memory: \
      "$(sqlite_script $((SCALE * 200000)))"
  fi
  if have /usr/bin/git; then
    check git "$rate" /bin/bash -c "$(declare -f git_session); git_session $((SCALE * 200))"
  fi
  if have /bin/bash; then
    check bash "$rate" /bin/bash -c "$(bash_script "$SCALE")"
  fi
done

if [[ $FAILED != 0 ]]; then
  echo "FAILED; work directory kept: $WORK"
  exit 1
fi
echo "all runs matched"
