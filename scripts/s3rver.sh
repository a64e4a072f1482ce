#!/usr/bin/env bash
# Installs s3rver (the S3-compatible server the S3 tests start on 127.0.0.1) from npm into
# tests/s3/node_modules (git-ignored), at the versions tests/s3/package-lock.json pins.
set -euo pipefail
cd "$(dirname "$0")/../tests/s3"
if grep -qs '"version": "3\.7\.' node_modules/s3rver/package.json; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
