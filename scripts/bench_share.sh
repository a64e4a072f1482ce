#!/usr/bin/env bash
# Where a d9 run's CPU time goes, from perf samples of that one run: the share spent in
# d9's own work against the program and its allocator. Prints figures; not a test.
#
# Usage: scripts/bench_share.sh [workload] [ops] [runs]
#        (default alloc_loop 40000000 3; workload: alloc_loop or cross_thread)
#
# Time ratios between separate runs move by 10-20 % on a shared machine; shares within
# one run do not, since interference slows d9 and the allocator alike. The first 150 ms
# (start-up, unwind tables built at the first CPU sample, first touch of d9's rings) and
# the last 120 ms (the exit seal) are left out: what remains is the steady state of a
# long-running process. steady overhead = 1 / (1 - d9 share), assuming the allocator's
# own work is what it would be without d9 (the benchmark's d9-off runs match jemalloc).
# Needs perf (Debian: apt-get install linux-perf).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
WORKLOAD=${1:-alloc_loop}
OPS=${2:-40000000}
RUNS=${3:-3}
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
[[ -x $BUILD_DIR/bench/$WORKLOAD && -f $BUILD_DIR/libd9.so ]] ||
  { echo "build $BUILD_DIR first (scripts/build.sh)" >&2; exit 1; }

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "# command: ${0#"$ROOT"/} $WORKLOAD $OPS $RUNS  (d9 $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown), defaults: 512 KiB, live set, CPU 99 Hz)"
for ((i = 1; i <= RUNS; i++)); do
  perf record -q -F 4999 -o "$OUT/perf.data" -- env LD_PRELOAD="$BUILD_DIR/libd9.so" \
    D9_OUTPUT="$OUT/trace" "$BUILD_DIR/bench/$WORKLOAD" "$OPS" >/dev/null 2>&1
  perf script -i "$OUT/perf.data" -F tid,time,ip,sym,dso 2>/dev/null >"$OUT/samples"
  python3 - "$OUT/samples" "$WORKLOAD" "$i" <<'PY'
import collections, re, sys
path, workload, run = sys.argv[1:4]
# jemalloc's functions inside libd9.so (its symbols are prefixed or internal).
JEMALLOC = re.compile(r'^(je_|d9_je_|extent_|emap_|pac_|eset|edata|tcache|arena_|large_|'
                      r'sz_|te_|cache_bin|base_|bin_|san_|hpa|sec_|pa_|ecache|rtree|'
                      r'malloc_mutex|witness|tsd_|nstime|psset|decay|ehooks|batcher|0x)')
FAST_PATH = {'malloc', 'free', 'operator delete[]', 'operator delete'}
rows, t0 = [], None
for line in open(path):
    m = re.match(r'\s*(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$', line)
    if not m:
        continue
    tid, t, sym, dso = m.group(1), float(m.group(2)), m.group(3).strip(), m.group(4)
    t0 = t if t0 is None else t0
    rows.append((t - t0, tid, re.sub(r'\+0x[0-9a-f]+$', '', sym), dso.rsplit('/', 1)[-1]))
if not rows:
    sys.exit('no samples (perf_event_paranoid?)')
# The program's threads run its code; d9's threads (the writer, the warm-up) never do.
program_tids = {r[1] for r in rows if r[3] == workload}
end = max(r[0] for r in rows)
cats, total = collections.Counter(), 0
for t, tid, sym, dso in rows:
    if t < 0.15 or t > end - 0.12:
        continue
    total += 1
    if dso == workload or dso.startswith('libc.so') or dso.startswith('ld-linux'):
        cats['program, libc'] += 1
    elif dso.startswith('libd9.so') and (JEMALLOC.match(sym) or sym == '[unknown]'):
        cats['jemalloc'] += 1
    elif dso.startswith('libd9.so') and sym in FAST_PATH:
        cats['d9: malloc/free fast path'] += 1
    elif tid not in program_tids:
        cats['d9: writer thread'] += 1
    elif dso.startswith('libunwind'):
        cats['d9: stack capture (libunwind)'] += 1
    elif dso == '[vdso]':
        cats['d9: clock reads'] += 1
    elif 'kernel' in dso:
        cats['d9: kernel (page faults)'] += 1
    else:
        cats['d9: sampled path, other'] += 1
d9 = sum(n for c, n in cats.items() if c.startswith('d9'))
print(f'run {run}: {total} samples in the steady window ({end - 0.27:.2f} s)')
for c, n in sorted(cats.items(), key=lambda x: -x[1]):
    print(f'  {100 * n / total:6.2f} %  {c}')
print(f'  d9 share {100 * d9 / total:.2f} %  ->  steady overhead {1 / (1 - d9 / total):.3f}x')
PY
  rm -rf "$OUT/trace" "$OUT/perf.data" "$OUT/samples"
done
