// libFuzzer target: arbitrary bytes through detection, decompression, the frame decoder and the
// typed layer. Besides "no crash", it checks invariants a caller relies on.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/decode_walk.h"
#include "writer/container.h"
#include "writer/trace.h"
#include "writer/wire_decoder.h"

namespace {

using namespace d9::decode;

// Small cap: a decompression bomb must fail fast instead of exhausting memory.
constexpr size_t kMaxOutput = size_t{64} << 20;

void Check(bool ok) {
  if (!ok) std::abort();
}

// Also checks that events carry one value per field and that validated lists and maps
// iterate completely.
struct WalkChecked : d9::test::WalkAll {
  bool OnEvent(const Event& e) override {
    Check(e.values.size() == e.schema->fields.size());
    WalkAll::OnEvent(e);
    Check(short_lists == 0);
    return true;
  }
};

void CheckResult(const DecodeResult& r, size_t size, uint64_t seen_events) {
  Check(r.events == seen_events);
  Check(r.bytes_consumed <= size);
  Check(r.ok() == r.error.empty());
  if (r.status == DecodeStatus::kOk) Check(r.bytes_consumed == size);
  if (!r.ok()) Check(r.error_offset <= size);
}

void DecodeRaw(std::span<const uint8_t> raw) {
  WalkChecked walk;
  Decoder decoder;
  DecodeResult r = decoder.Decode(raw, walk);
  CheckResult(r, raw.size(), walk.events);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> input(data, size);
  DecompressOptions options;
  options.max_output_bytes = kMaxOutput;

  // The CLI's path: detect, decompress, build a Trace.
  Trace t = DecodeTraceBuffer(input, options);
  uint64_t counted = 0;
  for (const auto& [name, n] : t.event_counts) counted += n;
  Check(counted == t.decode.events);
  for (const auto& a : t.allocs) Check(a.stack == kUnresolvedStack || a.stack < t.stacks.size());
  for (const auto& s : t.cpu_samples) {
    Check(s.stack == kUnresolvedStack || s.stack < t.stacks.size());
  }

  // The generic path over the decompressed bytes.
  RawTrace raw = Decompress(input, options);
  Check(raw.bytes.size() <= kMaxOutput);
  DecodeRaw(raw.bytes);

  // Frames behind a valid header, so mutations need not preserve the magic to reach the decoder.
  std::vector<uint8_t> framed = {'T', 'R', 'C', 0, 1};
  framed.insert(framed.end(), data, data + size);
  DecodeRaw(framed);
  return 0;
}
