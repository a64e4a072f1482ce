// libFuzzer target: arbitrary bytes through detection, decompression, the frame decoder and the
// typed layer. Besides "no crash", it checks invariants a caller relies on.
#include <cstdint>
#include <cstdlib>
#include <vector>

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

// Reads every value, including list/map elements, so sanitizers see all accesses.
struct WalkAll : Visitor {
  uint64_t events = 0;
  uint64_t sink = 0;
  void Walk(const Value& v) {
    sink += v.bits + v.size + static_cast<uint64_t>(v.kind);
    switch (v.kind) {
      case ValueKind::kString:
      case ValueKind::kBytes:
        for (char c : v.str()) sink += static_cast<uint8_t>(c);
        break;
      case ValueKind::kStack:
        for (uint64_t f : v.stack()) sink += f;
        break;
      case ValueKind::kStringMap:
        for (auto [k, val] : v.string_map()) sink += k.size() + val.size();
        break;
      case ValueKind::kList: {
        uint32_t n = 0;
        for (const Value& e : v.list()) {
          Walk(e);
          ++n;
        }
        Check(n == v.count);  // validated lists always iterate completely
        break;
      }
      case ValueKind::kMap: {
        uint32_t n = 0;
        for (const auto& [k, val] : v.map()) {
          Walk(k);
          Walk(val);
          ++n;
        }
        Check(n == v.count);
        break;
      }
      default:
        break;
    }
  }
  bool OnEvent(const Event& e) override {
    ++events;
    Check(e.values.size() == e.schema->fields.size());
    for (const Value& v : e.values) Walk(v);
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
  WalkAll walk;
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
