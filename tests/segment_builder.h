// Segments built in memory for the `d9` command's tests, with the encoder, including events
// the encoder has no method for (CpuSampleEvent, Libd9LiveAllocation), written as hand-made
// frames in their own sub-stream; and the compressed containers of such bytes.
#pragma once

#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "writer/encoder.h"
#include "writer/format.h"

namespace d9::test {

struct CpuSpec {
  uint64_t ts = 0;
  uint32_t tid = 0;
  uint8_t source = 0;
  std::string thread_name;  // "" = absent
  std::vector<uint64_t> stack;
};

struct LiveSpec {
  uint32_t tid = 0;
  uint64_t size = 0, addr = 0, alloc_ts = 0;
  std::vector<uint64_t> stack;
};

// One segment: ClockSync, metadata + ClockSync, then whatever the test adds.
class SegmentBuilder {
 public:
  static constexpr uint64_t kMono = 1'000'000'000'000;              // 1000 s after boot
  static constexpr uint64_t kRealtime = 1'700'000'000'000'000'000;  // 2023-11-14 22:13:20 UTC

  explicit SegmentBuilder(const StringMap& metadata, uint64_t mono = kMono,
                          uint64_t realtime = kRealtime) {
    e_.begin_stream();
    e_.clock_sync(mono, realtime);
    e_.segment_metadata(mono, metadata);
    e_.clock_sync(mono, realtime);
  }

  Encoder& enc() { return e_; }

  // Each call writes one hand-made sub-stream, then starts a fresh one for the encoder.
  void cpu_samples(const std::vector<CpuSpec>& samples) {
    e_.begin_stream();
    schema(0, fmt::kCpuSampleEvent, true,
           {{"worker_id", 9},
            {"tid", 13},
            {"source", 11},
            {"thread_name", 0x87},
            {"callchain", 6},
            {"cpu", 0x89}});
    uint32_t next = 0;
    for (const CpuSpec& s : samples) {
      uint32_t stack_id = next++;
      stack_pool(stack_id, s.stack);
      uint32_t name_id = next++;
      if (!s.thread_name.empty()) string_pool(name_id, s.thread_name);
      e_.put_u8(static_cast<uint8_t>(fmt::Frame::kTimestampReset));
      e_.put_u64(s.ts);
      e_.put_u8(static_cast<uint8_t>(fmt::Frame::kEvent));
      e_.put_u16(0);
      e_.put_u24(0);
      e_.put_varint(255);
      e_.put_u32(s.tid);
      e_.put_u8(s.source);
      if (s.thread_name.empty()) {
        e_.put_u8(0);
      } else {
        e_.put_u8(1);
        e_.put_u32(name_id);
      }
      e_.put_u32(stack_id);
      e_.put_u8(0);  // cpu absent
    }
    e_.begin_stream();
  }

  void live_allocations(const std::vector<LiveSpec>& live) {
    e_.begin_stream();
    schema(0, "Libd9LiveAllocation", false,
           {{"tid", 13}, {"size", 9}, {"addr", 9}, {"alloc_timestamp_ns", 9}, {"callchain", 6}});
    uint32_t next = 0;
    for (const LiveSpec& l : live) {
      uint32_t stack_id = next++;
      stack_pool(stack_id, l.stack);
      e_.put_u8(static_cast<uint8_t>(fmt::Frame::kEvent));
      e_.put_u16(0);
      e_.put_u32(l.tid);
      e_.put_varint(l.size);
      e_.put_varint(l.addr);
      e_.put_varint(l.alloc_ts);
      e_.put_u32(stack_id);
    }
    e_.begin_stream();
  }

  // Symbols go in their own sub-stream at the end, as libd9 writes them at seal.
  void symbols(const std::vector<std::tuple<uint64_t, std::string, int, std::string, int>>& syms) {
    e_.begin_stream();
    for (const auto& [addr, name, depth, file, line] : syms) {
      e_.symbol_entry(addr, 0, name, static_cast<uint64_t>(depth), file,
                      static_cast<uint64_t>(line));
    }
  }

  std::vector<uint8_t> bytes() const { return {e_.bytes().begin(), e_.bytes().end()}; }

 private:
  void schema(uint16_t id, const std::string& name, bool ts,
              const std::vector<std::pair<std::string, uint8_t>>& fields) {
    e_.put_u8(static_cast<uint8_t>(fmt::Frame::kSchema));
    e_.put_u16(id);
    chars16(name);
    e_.put_u8(ts ? 1 : 0);
    e_.put_u16(static_cast<uint16_t>(fields.size()));
    for (const auto& [n, t] : fields) {
      chars16(n);
      e_.put_u8(t);
    }
  }
  void chars16(const std::string& s) {
    e_.put_u16(static_cast<uint16_t>(s.size()));
    for (char c : s) e_.put_u8(static_cast<uint8_t>(c));
  }
  void stack_pool(uint32_t id, const std::vector<uint64_t>& frames) {
    e_.put_u8(static_cast<uint8_t>(fmt::Frame::kStackPool));
    e_.put_u32(1);
    e_.put_u32(id);
    e_.put_u32(static_cast<uint32_t>(frames.size()));
    for (uint64_t f : frames) e_.put_u64(f);
  }
  void string_pool(uint32_t id, const std::string& s) {
    e_.put_u8(static_cast<uint8_t>(fmt::Frame::kStringPool));
    e_.put_u32(1);
    e_.put_u32(id);
    e_.put_bytes(s);
  }

  mutable Encoder e_;
};

inline std::vector<uint8_t> zstd_compress(const std::vector<uint8_t>& in) {
  std::vector<uint8_t> out(ZSTD_compressBound(in.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

inline std::vector<uint8_t> gzip_compress(const std::vector<uint8_t>& in) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 32);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace d9::test
