# shellcheck shell=bash
# Sourced from the top of the tree by the scripts that run d9 on a trace of a test program
# (cli_bench.sh, report_bench.sh, cli_svg_screenshot.sh): `. scripts/need_build.sh PROGRAM...`
# sets build (BUILD_DIR, default build) and d9 (its d9 command), and builds d9, libd9.so and
# those tests/programs there when one of them is missing.
build=${BUILD_DIR:-build}
d9=$build/d9
need_build_missing=
[ -x "$d9" ] && [ -f "$build/libd9.so" ] || need_build_missing=1
for need_build_program in "$@"; do
  [ -x "$build/tests/programs/$need_build_program" ] || need_build_missing=1
done
if [ -n "$need_build_missing" ]; then
  echo "== building d9, libd9.so and $* in $build"
  cmake -S . -B "$build" -DD9_BUILD_TESTS=ON >/dev/null
  make -C "$build" -j"$(nproc)" d9_cli d9 "$@" >/dev/null
fi
