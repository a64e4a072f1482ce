// libd9_seal.so: the seal tools (writer/seal_tools.h) over the symbolizer, libzstd and zlib.
#include <zlib.h>
#include <zstd.h>

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

  std::vector<ModuleInfo> modules() override {
    std::vector<ModuleInfo> out;
    for (const symbolize::Module& m : symbolizer_.modules()) {
      out.push_back({m.path, m.build_id_hex, m.start, m.end, m.bias, m.loaded});
    }
    return out;
  }

  void refresh_modules() override { symbolizer_.refresh_modules(); }

  bool compress(std::span<const uint8_t> data, SealCompression how, std::vector<uint8_t>* out,
                std::string* error) override {
    return how == SealCompression::kZstd ? zstd(data, out, error) : gzip(data, out, error);
  }

 private:
  static bool zstd(std::span<const uint8_t> data, std::vector<uint8_t>* out, std::string* error) {
    out->resize(ZSTD_compressBound(data.size()));
    size_t n = ZSTD_compress(out->data(), out->size(), data.data(), data.size(), kZstdLevel);
    if (ZSTD_isError(n)) {
      *error = ZSTD_getErrorName(n);
      return false;
    }
    out->resize(n);
    return true;
  }

  // One gzip member (dial9's readers, and older Node zlib, want exactly one), fast level.
  static bool gzip(std::span<const uint8_t> data, std::vector<uint8_t>* out, std::string* error) {
    z_stream z{};
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      *error = "deflateInit2 failed";
      return false;
    }
    out->resize(deflateBound(&z, data.size()) + 32);
    z.next_in = const_cast<Bytef*>(data.data());
    z.avail_in = static_cast<uInt>(data.size());
    z.next_out = out->data();
    z.avail_out = static_cast<uInt>(out->size());
    int rc = deflate(&z, Z_FINISH);
    size_t n = z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
      *error = "deflate failed";
      return false;
    }
    out->resize(n);
    return true;
  }

  symbolize::Symbolizer symbolizer_;
  std::vector<SymbolFrame> out_;
};

}  // namespace
}  // namespace d9

extern "C" __attribute__((visibility("default"))) d9::SealTools* d9_create_seal_tools_v2(
    bool inflate_compressed_debug_files) {
  return new d9::Tools(inflate_compressed_debug_files);
}
