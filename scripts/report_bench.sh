#!/usr/bin/env bash
# Time, peak memory and HTML size of `d9 report` on a large trace, beside `d9 summary`.
#
#   bash scripts/report_bench.sh [ROUNDS]
#
# Generates the trace once under $D9_BENCH_DIR (default /tmp/d9-report-bench): memory_shape
# (tests/programs) at D9_SAMPLE_RATE=1, uncompressed, run again and again as separate
# processes until the raw trace reaches D9_BENCH_MB (default 1024) MB; each run records
# ~3.6 M allocations and as many frees (~160 MB). Then runs `d9 summary` and `d9 report`
# in interleaved rounds (default 3) and prints the median wall and CPU seconds and the
# largest peak RSS of each, and the size of the page.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bench=${D9_BENCH_DIR:-/tmp/d9-report-bench}
target_mb=${D9_BENCH_MB:-1024}
# shellcheck source=scripts/need_build.sh
. scripts/need_build.sh memory_shape

mkdir -p "$bench/trace"
while [ "$(du -sm "$bench/trace" | cut -f1)" -lt "$target_mb" ]; do
  echo "== trace: $(du -sm "$bench/trace" | cut -f1) MB of $target_mb; one more memory_shape run"
  D9_OUTPUT="$bench/trace" D9_SAMPLE_RATE=1 D9_RING_SLOTS=1048576 D9_COMPRESS=none \
    LD_PRELOAD="$PWD/$build/libd9.so" "$build/tests/programs/memory_shape" >/dev/null
done
echo "trace: $(du -sm "$bench/trace" | cut -f1) MB raw in $(find "$bench/trace" -type f | wc -l) segments"

python3 - "$d9" "$bench" "$rounds" <<'PY'
import os, resource, statistics, subprocess, sys, time
d9, bench, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
trace, page = bench + "/trace", bench + "/report.html"
runs = {"summary": [d9, "summary", "--no-progress", trace],
        "report": [d9, "report", "--no-progress", "-o", page, trace]}
res = {k: [] for k in runs}
for _ in range(rounds):
    for name, argv in runs.items():  # interleaved
        pid = os.fork()
        if pid == 0:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1); os.dup2(fd, 2)
            os.execv(argv[0], argv)
        t = time.time()
        _, status, ru = os.wait4(pid, 0)
        wall = time.time() - t
        assert status == 0, name
        res[name].append((wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024))
print("%-8s %10s %10s %14s" % ("command", "wall s", "cpu s", "peak RSS MB"))
for name, r in res.items():
    print("%-8s %10.2f %10.2f %14.0f" % (name, statistics.median(x[0] for x in r),
                                        statistics.median(x[1] for x in r), max(x[2] for x in r)))
print("report.html: %.1f KB" % (os.path.getsize(page) / 1024))
PY
