// Trace containers: tells raw dial9 bytes ("TRC\0" ...), gzip and zstd apart by their magic
// bytes and decompresses a buffer or a file into raw bytes, with a cap on the output size.
// Errors come back as a string, together with whatever was recovered before them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace d9::decode {

enum class Container : uint8_t { kUnknown, kRaw, kGzip, kZstd };
const char* ContainerName(Container c);

// Looks only at the magic bytes (zstd 28 b5 2f fd, gzip 1f 8b, raw "TRC\0"), never a file name.
Container DetectContainer(std::span<const uint8_t> data);

// Big enough for any real segment, small enough that a decompression bomb cannot take the host.
inline constexpr size_t kDefaultMaxDecompressedBytes = size_t{1} << 30;

struct DecompressOptions {
  // Decompression stops with an error once the output would exceed this many bytes.
  size_t max_output_bytes = kDefaultMaxDecompressedBytes;
};

struct RawTrace {
  std::vector<uint8_t> bytes;  // raw dial9 stream; on error, whatever was recovered before it
  Container container = Container::kUnknown;
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
};

// Decompresses every zstd frame / gzip member; raw input is copied unchanged.
RawTrace Decompress(std::span<const uint8_t> input, const DecompressOptions& options = {});
// Reads `path` and decompresses it as above. I/O errors are reported in `error`.
RawTrace ReadTraceFile(const std::string& path, const DecompressOptions& options = {});

}  // namespace d9::decode
