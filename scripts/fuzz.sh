#!/usr/bin/env bash
# Fuzzes the trace decoder (tests/fuzz/decoder_fuzz.cc) and the S3 listing parser
# (tests/fuzz/list_xml_fuzz.cc) with libFuzzer.
# Usage: scripts/fuzz.sh [seconds=30] [extra libFuzzer flags...]
# Builds with clang++ -fsanitize=fuzzer,address,undefined into build-fuzz/ (or $D9_FUZZ_DIR),
# seeds the corpus from the fixtures and exits non-zero if the fuzzer finds a crash.
set -euo pipefail

secs=${1:-30}
[[ $# -gt 0 ]] && shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${D9_FUZZ_DIR:-$root/build-fuzz}
fixtures=$root/tests/fixtures
cxx=${FUZZ_CXX:-clang++}

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts"

echo "== building $out/decoder_fuzz"
# shellcheck disable=SC2046  # pkg-config output is meant to split
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer -Wall -Wextra -Werror -I"$root" \
  "$root"/writer/{container,wire_decoder,trace_tables,trace}.cc "$root/tests/fuzz/decoder_fuzz.cc" \
  $(pkg-config --libs libzstd zlib) -o "$out/decoder_fuzz"

echo "== seeding from $fixtures"
seeds=$out/seeds
cp -f "$fixtures/d9-contract-smoke.0.bin" "$seeds/smoke.bin"
cp -f "$fixtures/d9-contract-smoke.0.bin.gz" "$seeds/smoke.bin.gz"
# The demo trace is 4 MB raw: seed with its first 64 KiB, raw and recompressed, for fast runs.
gzip -dc "$fixtures/dial9-demo-trace.bin" 2>/dev/null | head -c 65536 >"$seeds/demo-head.bin" || true
gzip -c "$seeds/demo-head.bin" >"$seeds/demo-head.bin.gz"
if command -v zstd >/dev/null; then
  zstd -q -f -c "$seeds/smoke.bin" >"$seeds/smoke.bin.zst"
  zstd -q -f -c "$seeds/demo-head.bin" >"$seeds/demo-head.bin.zst"
fi

# Tokens that let mutations build frames: header, frame tags with small ids, event names.
dict=$out/decoder.dict
cat >"$dict" <<'DICT'
"TRC\x00\x01"
"\x1f\x8b"
"(\xb5/\xfd"
"\x01\x00\x00"
"\x02\x00\x00"
"\x03\x01\x00\x00\x00"
"\x04\x01\x00\x00\x00"
"\x05"
"\x06"
"\x87"
"\x89"
"\xff\xff\xff\xff"
"CpuSampleEvent"
"AllocEvent"
"FreeEvent"
"SegmentMetadataEvent"
"SymbolTableEntry"
DICT

echo "== fuzzing for ${secs}s"
set +e
"$out/decoder_fuzz" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -dict="$dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
  "$out/corpus" "$seeds" "$@"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "decoder_fuzz failed (exit $rc); reproducers in $out/artifacts/" >&2
  exit $rc
fi

# The ListObjectsV2 parser (ship/layout.cc): a third of the time, seeded from a real answer.
echo "== building and fuzzing $out/list_xml_fuzz for $(( (secs + 2) / 3 ))s"
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer -Wall -Wextra -Werror -I"$root" \
  "$root/ship/layout.cc" "$root/tests/fuzz/list_xml_fuzz.cc" -o "$out/list_xml_fuzz"
mkdir -p "$out/xml-corpus"
set +e
"$out/list_xml_fuzz" -max_total_time=$(( (secs + 2) / 3 )) -max_len=8192 -timeout=10 \
  -artifact_prefix="$out/artifacts/" "$out/xml-corpus" "$fixtures/s3"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  echo "list_xml_fuzz failed (exit $rc); reproducers in $out/artifacts/" >&2
fi
exit $rc
