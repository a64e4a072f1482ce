# shellcheck shell=bash
# Sourced by the scripts that run d9 on a trace of a test program (cli_bench.sh,
# report_bench.sh, cli_svg_screenshot.sh): need_build BUILD PROGRAM... builds d9, libd9.so
# and those tests/programs into BUILD when one of them is missing.
need_build() {
  local build=$1 program
  shift
  local missing=
  [ -x "$build/d9" ] && [ -f "$build/libd9.so" ] || missing=1
  for program in "$@"; do
    [ -x "$build/tests/programs/$program" ] || missing=1
  done
  [ -n "$missing" ] || return 0
  echo "== building d9, libd9.so and $* in $build"
  cmake -S . -B "$build" -DD9_BUILD_TESTS=ON >/dev/null
  make -C "$build" -j"$(nproc)" d9_cli d9 "$@" >/dev/null
}
