#!/usr/bin/env bash
# Installs what is missing, builds d9, profiles the bundled demo service with libd9.so
# preloaded, and prints the analysis of the trace it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=build bash scripts/build.sh
out=$(mktemp -d /tmp/d9-demo.XXXXXX)
echo "== running the demo service under libd9.so (traces in $out)"
D9_OUTPUT="$out" LD_PRELOAD="$PWD/build/libd9.so" build/tests/programs/demo_service
echo
echo "== d9 summary $out"
build/d9 summary "$out"
echo
echo "== d9 alloc $out"
build/d9 alloc "$out"
