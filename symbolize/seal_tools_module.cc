// libd9_seal.so: the seal tools (writer/seal_tools.h) over the symbolizer, libzstd and zlib.
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "symbolize/symbolizer.h"
#include "writer/seal_tools.h"

namespace d9 {
namespace {

// Level 2: on d9 segments as fast as level 1 and 1.4-1.6x faster than the default level 3,
// within 2% of its size (scripts/bench: zstd -b1 -e3 on raw alloc_loop and python3 traces).
constexpr int kZstdLevel = 2;

class Tools final : public SealTools {
 public:
  explicit Tools(bool inflate_compressed_debug_files)
      : symbolizer_(
            symbolize::Options{.inflate_compressed_debug_files = inflate_compressed_debug_files}) {}

  const std::vector<SymbolFrame>& resolve(uint64_t addr) override {
    const std::vector<symbolize::Frame>& frames = symbolizer_.resolve(addr);
    out_.resize(frames.size());
    for (size_t i = 0; i < frames.size(); ++i) {
      out_[i].function = frames[i].function;
      out_[i].file = frames[i].file;
      out_[i].line = frames[i].line;
    }
    return out_;
  }

  void prepare(std::span<const uint64_t> addrs) override { symbolizer_.prepare(addrs); }

  std::vector<ModuleInfo> modules() override {
    std::vector<ModuleInfo> out;
    for (const symbolize::Module& m : symbolizer_.modules()) {
      out.push_back({m.path, m.build_id_hex, m.start, m.end, m.bias, m.loaded});
    }
    return out;
  }

  void refresh_modules(bool open_all) override { symbolizer_.refresh_modules(open_all); }

  bool compress(const Read& read, uint64_t size, const Write& write, SealCompression how,
                std::string* error) override {
    if (!in_) in_ = std::make_unique_for_overwrite<uint8_t[]>(kChunk);
    return how == SealCompression::kZstd ? zstd(read, size, write, error)
                                         : gzip(read, write, error);
  }

 private:
  static constexpr size_t kChunk = 128 << 10;

  // One context for every seal: its tables are made once, not per segment.
  bool zstd(const Read& read, uint64_t size, const Write& write, std::string* error) {
    if (!cctx_) cctx_.reset(ZSTD_createCCtx());
    if (!cctx_) {
      *error = "ZSTD_createCCtx failed";
      return false;
    }
    ZSTD_CCtx* c = cctx_.get();
    ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, kZstdLevel);
    ZSTD_CCtx_setPledgedSrcSize(c, size);  // in the frame header; small inputs, small tables
    uint8_t* out = out_buffer(ZSTD_CStreamOutSize());
    uint64_t read_so_far = 0;
    for (;;) {
      ssize_t n = read(in_.get(), kChunk);
      if (n < 0) {
        *error = std::string("read failed: ") + strerror(errno);
        return false;
      }
      read_so_far += static_cast<uint64_t>(n);
      ZSTD_inBuffer ib{in_.get(), static_cast<size_t>(n), 0};
      // Ended as soon as the last byte is in: a segment that fits one chunk is compressed
      // in one pass, straight into `out`, without zstd's stream buffers.
      const bool last = n == 0 || read_so_far >= size;
      const ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
      for (;;) {
        ZSTD_outBuffer ob{out, ZSTD_CStreamOutSize(), 0};
        size_t left = ZSTD_compressStream2(c, &ob, &ib, mode);
        if (ZSTD_isError(left)) {
          *error = ZSTD_getErrorName(left);
          return false;
        }
        if (ob.pos > 0 && !write({out, ob.pos})) return false;
        if (last ? left == 0 : ib.pos == ib.size) break;
      }
      if (last) return true;
    }
  }

  // The output buffer, at least `size` bytes, kept between seals. Not zeroed: a short
  // process's seal touches only the pages it writes.
  uint8_t* out_buffer(size_t size) {
    if (packed_size_ < size) {
      packed_ = std::make_unique_for_overwrite<uint8_t[]>(size);
      packed_size_ = size;
    }
    return packed_.get();
  }

  // One gzip member (dial9's readers, and older Node zlib, want exactly one), fast level.
  bool gzip(const Read& read, const Write& write, std::string* error) {
    z_stream z{};
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      *error = "deflateInit2 failed";
      return false;
    }
    std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, deflateEnd);
    uint8_t* out = out_buffer(kChunk);
    for (;;) {
      ssize_t n = read(in_.get(), kChunk);
      if (n < 0) {
        *error = std::string("read failed: ") + strerror(errno);
        return false;
      }
      const int flush = n == 0 ? Z_FINISH : Z_NO_FLUSH;
      z.next_in = in_.get();
      z.avail_in = static_cast<uInt>(n);
      int rc;
      do {
        z.next_out = out;
        z.avail_out = static_cast<uInt>(kChunk);
        rc = deflate(&z, flush);
        if (rc == Z_STREAM_ERROR) {
          *error = "deflate failed";
          return false;
        }
        size_t produced = kChunk - z.avail_out;
        if (produced > 0 && !write({out, produced})) return false;
      } while (z.avail_out == 0);
      if (n == 0) {
        if (rc != Z_STREAM_END) {
          *error = "deflate failed";
          return false;
        }
        return true;
      }
    }
  }

  symbolize::Symbolizer symbolizer_;
  std::vector<SymbolFrame> out_;
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx_{nullptr, ZSTD_freeCCtx};
  std::unique_ptr<uint8_t[]> in_;  // kChunk bytes, kept between seals, never zeroed
  std::unique_ptr<uint8_t[]> packed_;
  size_t packed_size_ = 0;
};

}  // namespace
}  // namespace d9

extern "C" __attribute__((visibility("default"))) d9::SealTools* d9_create_seal_tools_v4(
    bool inflate_compressed_debug_files) {
  return new d9::Tools(inflate_compressed_debug_files);
}
