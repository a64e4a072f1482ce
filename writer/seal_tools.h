// The tools a segment needs when it is sealed: symbolization (elfutils libdw) and
// compression (zstd, zlib).
//
// They live in a separate shared object, libd9_seal.so, installed beside libd9.so and
// loaded with dlopen(RTLD_LOCAL) by the writer thread at its first seal. Linked into
// libd9.so they would put libdw, libelf, libzstd, zlib, liblzma and libbz2 into every
// host's global symbol scope, where they could bind to the host's own copies, or the host's
// to ours. Loaded locally, the host never sees them. If the module cannot be loaded, d9
// says so once and seals segments unsymbolized and uncompressed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace d9 {

struct SymbolFrame {
  std::string function;
  std::string file;
  uint32_t line = 0;
};

struct ModuleInfo {
  std::string path;
  std::string build_id;  // lowercase hex, "" when the object has none
  uint64_t start = 0, end = 0, bias = 0;
  bool loaded = true;
};

enum class SealCompression : uint8_t { kZstd, kGzip };

class SealTools {
 public:
  virtual ~SealTools() = default;
  // Frames of an address found in a callchain: outermost function first (index = inline
  // depth), never empty. The reference is valid until the next call.
  virtual const std::vector<SymbolFrame>& resolve(uint64_t addr) = 0;
  // The addresses about to be resolved, all at once: lets the symbolizer read a module's
  // symbol table in one pass instead of indexing it (symbolize::Symbolizer::prepare).
  virtual void prepare(std::span<const uint64_t> addrs) = 0;
  // Every module seen so far, including unloaded ones.
  virtual std::vector<ModuleInfo> modules() = 0;
  // Takes note of the modules mapped now, so they stay resolvable after a dlclose. Their
  // files are read at the first lookup in them, or now with `open_all`
  // (symbolize::Symbolizer::refresh_modules).
  virtual void refresh_modules(bool open_all) = 0;
  // Reads `size` bytes from `read` (bytes read into buf, 0 at the end, -1 on error) and
  // passes them to `write` as one zstd frame or one gzip member, a chunk at a time: memory
  // stays at a few hundred KiB whatever the segment's size. False (with *error, empty when
  // `write` failed) on failure.
  using Read = std::function<ssize_t(uint8_t* buf, size_t cap)>;
  using Write = std::function<bool(std::span<const uint8_t> bytes)>;
  virtual bool compress(const Read& read, uint64_t size, const Write& write, SealCompression how,
                        std::string* error) = 0;
};

// Entry point exported by libd9_seal.so. `inflate_compressed_debug_files` is
// symbolize::Options' flag of that name (D9_SYMBOLIZE=full).
inline constexpr char kSealToolsLibrary[] = "libd9_seal.so";
inline constexpr char kSealToolsEntry[] = "d9_create_seal_tools_v4";
using CreateSealToolsFn = SealTools* (*)(bool inflate_compressed_debug_files);

// Loads libd9_seal.so from the directory libd9.so was loaded from and creates the tools;
// nullptr (with *error set) if that fails. Call from the writer thread only.
SealTools* load_seal_tools(bool inflate_compressed_debug_files, std::string* error);

}  // namespace d9
