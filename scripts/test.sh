#!/usr/bin/env bash
# The full test suite, as CI runs it (.ci/run calls this script):
#   1. installs missing Debian packages, builds everything, runs every CTest test
#      (unit tests and end-to-end tests that preload libd9.so into real programs);
#   2. rebuilds the code that is never injected into hosts with ASan+UBSan and with TSan
#      and runs its unit tests;
#   3. runs the decoder fuzz target for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash scripts/setup.sh
bash scripts/s3rver.sh  # the S3 tests' server, from npm

echo "== build and test (RelWithDebInfo)"
BUILD_DIR=build bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$jobs" --timeout 600)

for san in address thread; do
  echo "== unit tests under ${san} sanitizer"
  BUILD_DIR="build-${san}" bash scripts/build.sh -DD9_SANITIZE="$san"
  (cd "build-${san}" && ctest --output-on-failure -j "$jobs" --timeout 600)
done

if [ -x scripts/fuzz.sh ] || [ -f scripts/fuzz.sh ]; then
  echo "== decoder fuzzing (${D9_FUZZ_SECONDS:-30} s)"
  bash scripts/fuzz.sh "${D9_FUZZ_SECONDS:-30}"
fi
echo "== all tests passed"
