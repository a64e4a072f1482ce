#!/usr/bin/env bash
# Installs the Debian 12 packages d9 needs to build and test, when they are missing.
# Needs root (or sudo) only if something is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config          # toolchain
  libjemalloc-dev libunwind-dev libdw-dev   # allocator, stacks, symbols
  libzstd-dev zlib1g-dev zstd               # segment compression
  libgtest-dev                              # tests
  clang                                     # libFuzzer target
  python3 sqlite3 git                       # real programs the tests run under d9
  libpython3.11-testsuite                   # CPython's own regression tests (python3 -m test)
  redis-server redis-tools                  # redis-server, redis-benchmark, redis-cli
  nginx wrk                                 # a static file server and its load generator
  chromium                                  # headless browser for the HTML report's tests
  libcurl4-openssl-dev libssl-dev           # S3 uploads and downloads (ship/: SigV4, MD5)
  awscli                                    # S3 tests: the independent client
)

# s3rver (the tests' S3 server, scripts/s3rver.sh) comes from npm: Debian's nodejs and npm
# unless a node with its own npm (nodesource's) is already installed.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "d9 setup: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# nginx and redis-server ship system services; the tests start instances of their own, so
# the install must not start (or enable a start of) one: policy-rc.d tells invoke-rc.d no.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
