#!/usr/bin/env bash
# Renders d9's SVG flame graphs in headless Chromium and saves PNG screenshots, to check by
# eye that they draw (and that the embedded script runs: a search given in the URL query,
# ?s=REGEX, highlights the matching frames and prints "Matched: …").
#
#   bash scripts/cli_svg_screenshot.sh [OUT_DIR] [TRACE_DIR]
#
# Without TRACE_DIR it profiles the bundled demo service (D9_SAMPLE_RATE=64K) first. Writes
# OUT_DIR/{alloc,cpu,live}.svg and {…,alloc-search,alloc-zoom}.png (default /tmp/d9-svg) and
# exits non-zero if a PNG is missing or blank. Installs Debian's `chromium` if it is missing.
# BUILD_DIR selects the build tree (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/d9-svg}
trace=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "== installing chromium (apt)"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
  browser=$(command -v chromium)
fi

# shellcheck source=scripts/need_build.sh
. scripts/need_build.sh demo_service
if [ -z "$trace" ]; then
  trace="$out/trace"
  rm -rf "$trace"
  echo "== profiling demo_service into $trace"
  D9_OUTPUT="$trace" D9_SAMPLE_RATE=64K D9_SEED=1 LD_PRELOAD="$PWD/$build/libd9.so" \
    "$build/tests/programs/demo_service" >/dev/null
fi

shot() {  # shot NAME URL SVG
  local png="$out/$1.png" height
  # The window as tall as the drawing (the SVG root carries its size).
  height=$(sed -n 's/^<svg [^>]*height="\([0-9]*\)".*/\1/p' "$3" | head -1)
  rm -f "$png"
  # A fresh profile directory each time: no state, no first-run UI.
  local profile
  profile=$(mktemp -d)
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --no-first-run --hide-scrollbars --user-data-dir="$profile" \
    --window-size=1200,"${height:-900}" --virtual-time-budget=2000 --screenshot="$png" "$2" >/dev/null 2>&1 || true
  rm -rf "$profile"
  if [ ! -s "$png" ]; then
    echo "FAIL: no screenshot for $1" >&2
    return 1
  fi
  # A blank page compresses to almost nothing; a drawn flame graph does not.
  local size
  size=$(stat -c %s "$png")
  if [ "$size" -lt 10000 ]; then
    echo "FAIL: $png is only $size bytes (blank?)" >&2
    return 1
  fi
  echo "$png ($size bytes)"
}

status=0
for kind in alloc cpu live; do
  if ! "$build/d9" flame --kind "$kind" --no-progress -o "$out/$kind.svg" "$trace" 2>/dev/null; then
    echo "skip $kind: nothing to draw"
    continue
  fi
  if [ "$(grep -c '<g data-n=' "$out/$kind.svg")" -le 1 ]; then
    echo "skip $kind: no $kind samples in the trace"
    continue
  fi
  shot "$kind" "file://$out/$kind.svg" "$out/$kind.svg" || status=1
done
# The search path of the embedded script: highlight the frames matching a regular expression
# and show their share at the bottom right.
cp "$out/alloc.svg" "$out/alloc-search.svg"
shot alloc-search "file://$out/alloc-search.svg?s=parse|cache|^0x" "$out/alloc.svg" || status=1
# Zoom (what a click does): the widest frame matching the regular expression fills the width.
shot alloc-zoom "file://$out/alloc-search.svg?zoom=basic_string::_M_create" "$out/alloc.svg" ||
  status=1
exit $status
