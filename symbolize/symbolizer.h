// Address -> function, inline frames and file:line for the live process, with elfutils
// libdwfl. This is what fills dial9 SymbolTableEntry records (dial9-format.md §2.7) at seal.
//
// Where it runs: d9's writer thread inside the profiled process (and the tests). Never in a
// signal handler or an allocation hook: it takes the loader lock (dl_iterate_phdr), opens
// files and allocates freely. One Symbolizer is not thread-safe; callers serialise.
//
// Modules: the constructor and refresh_modules() walk dl_iterate_phdr and note every new
// object (main executable, shared libraries, the vDSO), with its build-id read from memory.
// Its file is opened at the first lookup of an address in it, or by the first
// refresh_modules() Options::open_after_ms after it was noted, whichever comes first: a
// short-lived process reads only the few objects its addresses are in, a long-running one
// reads them all early, before an upgrade can replace them on disk. The file is checked
// against the build-id from memory (a replaced file would give wrong answers: refused) and
// reported to one Dwfl session; its descriptor is closed right away (libelf keeps a
// private mapping), so d9 holds no descriptors for modules. Modules are never dropped: an object
// unloaded with dlclose stays resolvable. When a new object is mapped over the range of an unloaded
// one, the newest mapping wins for lookups from then on (see refresh_modules()).
//
// Debug info: DWARF in the file itself, or a separate file found the standard way (build-id
// under /usr/lib/debug/.build-id, or .gnu_debuglink next to the file, in .debug/ or under
// /usr/lib/debug), and the dwz file it points to; a compressed separate file only for its
// .symtab unless Options::inflate_compressed_debug_files. d9 finds and opens these itself, again
// without keeping descriptors: libdwfl would keep every descriptor it is handed until
// dwfl_end, then close it whatever it has become. debuginfod is not queried unless
// Options::debuginfod is set: a download can take minutes, touches the network and writes
// to the host user's cache directory (and the standard search it enables keeps descriptors).
//
// Cost: libdw's dwarf_getscopes walks a whole compile unit per address (milliseconds for
// -O2 C++ units), and dwfl_module_addrinfo scans the whole symbol table. Instead each
// compile unit is indexed on first use (dwarf_index.h) and each symbol table once
// (symbol_index.h), unless prepare() can do with a pass over it; both stay in memory with
// the answers cache, for the Symbolizer's life.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

struct Dwfl;
struct Dwfl_Module;

namespace d9::symbolize {

// One function level at an address. For dial9 the index in the vector is the inline_depth.
struct Frame {
  std::string function;  // demangled ("ns::Klass::method(int)"), or a placeholder
  std::string file;      // source path as DWARF records it (normally absolute); the module
                         // path for symbol-table-only frames
  uint32_t line = 0;     // 0 when unknown
};

// A mapped (or formerly mapped) object, for the segment's module map.
struct Module {
  std::string path;          // file path; "[vdso]" for the vDSO
  std::string build_id_hex;  // lowercase hex of NT_GNU_BUILD_ID, or "" when absent
  uint64_t start = 0;        // first byte of the lowest PT_LOAD (page aligned)
  uint64_t end = 0;          // one past the highest PT_LOAD byte
  uint64_t bias = 0;         // load bias: runtime address - ELF virtual address
  bool loaded = true;        // false once dlclose'd (still resolvable)
};

// Offline mode: what became of one module of a recorded module map.
enum class ModuleFile : uint8_t {
  kOk,           // opened; its build-id matches the recorded one (or none was recorded)
  kMissing,      // no file at the recorded path, nor a debug file for its build-id
  kNotElf,       // the file exists but cannot be read as ELF
  kMismatch,     // the file's build-id differs from the recorded one: refused
  kUnavailable,  // a pseudo path ("[vdso]" of another kernel, "[unknown]"): nothing to read
};
const char* ModuleFileName(ModuleFile f);

struct ModuleCheck {
  Module module;  // as recorded
  ModuleFile file = ModuleFile::kOk;
  std::string opened;             // the file read ("" unless kOk)
  std::string file_build_id_hex;  // the file's build-id, for kMismatch
};

struct Options {
  // Let elfutils fetch missing debug info from the servers in DEBUGINFOD_URLS.
  bool debuginfod = false;
  // Read the DWARF of a separate debug file found for a module (build-id, .gnu_debuglink)
  // even when its sections are compressed. libdw inflates every debug section of a file
  // when it opens its DWARF: ~70 ms for Debian's libc6-dbg, paid by every short-lived
  // process at its exit. When false, such a module resolves from the debug file's .symtab
  // only, as a module without DWARF does (one frame, module path as file, line 0). DWARF in
  // the module itself, and uncompressed debug files, are always read. The offline CLI keeps
  // the default; libd9's seal tools pass false unless D9_SYMBOLIZE=full.
  bool inflate_compressed_debug_files = true;
  // A module's file is read at its first lookup, or by the first refresh_modules() this
  // long after the module was noted.
  uint64_t open_after_ms = 1000;
};

class Symbolizer {
 public:
  // Reports the modules of the current process. If libdw cannot start, every address
  // resolves to a placeholder.
  explicit Symbolizer(const Options& options = {});
  // Offline (`d9 symbolize`): resolves addresses of another, possibly long gone, process
  // from its recorded module map (Libd9Module events), in recorded (discovery) order: a
  // later module wins a range it shares with an earlier one, as it did in the process. Each
  // module is read from its recorded path, or, when that is gone, from the debug file of its
  // build-id under /usr/lib/debug/.build-id; a file whose build-id differs from the recorded
  // one is refused (kMismatch), since it would give wrong answers. The vDSO is used when the
  // running kernel's has the recorded build-id. Separate debug files are found as in process.
  // Addresses in refused or missing modules resolve to "[unknown]" placeholders.
  // refresh_modules() does nothing in this mode.
  Symbolizer(const std::vector<Module>& recorded, const Options& options);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Frames for an address as found in a callchain, outermost real function first
  // (inline_depth 0), then each inlined callee (depth 1..n). Never empty.
  //
  // `addr` is taken to be a return address: everything is looked up at addr-1 (the call
  // instruction), while results stay keyed by `addr`. A leaf that is an exact pc resolves
  // the same way, which is wrong only when that pc is the first byte of a function.
  //
  // Locations: the innermost frame gets the line-table file:line of the instruction; every
  // outer frame gets the call site (DW_AT_call_file:DW_AT_call_line) of the inlined callee
  // one level deeper. Without DWARF, one frame named from .symtab/.dynsym with the module
  // path as file and line 0. Placeholders: "[kernel] 0x<hex>" (file "kernel") for
  // addresses at or above 0x800000000000 outside every module, "[unknown] 0x<hex>" (file =
  // module path, or "" outside every module). Inlined functions with internal linkage have
  // no linkage name in DWARF: they are named "ns::Klass::fn", without parameters.
  //
  // Results are cached per address. The reference stays valid until the next call to
  // refresh_modules() (which drops cached results under newly mapped ranges) or until
  // the Symbolizer is destroyed. An address outside every known module triggers one
  // refresh_modules() if objects were loaded or unloaded since the last one.
  const std::vector<Frame>& resolve(uint64_t addr);

  // Addresses about to be resolve()d (a segment's, at seal). In a module whose symbol
  // table has no index yet they are looked up together, in one pass over the table:
  // building libc's index takes 1-2 ms, a pass a third of that, and a short-lived process
  // needs only a few of its addresses. Answers are the same either way.
  void prepare(std::span<const uint64_t> addrs);

  // Reports objects loaded since the last call (dlopen). Unloaded ones stay reported and
  // resolvable, with Module::loaded cleared.
  //
  // Limitation: symbols are resolved against the mapping known at the time of the call.
  // If an object is unloaded and another is mapped over the same addresses, addresses
  // captured before the unload but resolved after this call resolve in the new object.
  // Call refresh_modules() and resolve() at least once per segment (at seal) to keep that
  // window small.
  //
  // `open_all` reads every module's file now: before a dlclose (the object, and perhaps
  // its file, is about to go), or before forks (children inherit what is read).
  void refresh_modules(bool open_all = false);

  // Every module reported so far, in discovery order (unloaded ones included).
  std::vector<Module> modules() const;

  // Offline: one check per recorded module, in recorded order (empty in process).
  const std::vector<ModuleCheck>& checks() const { return checks_; }
  // Offline: the check of the module that resolves return address `addr` (looked up at
  // addr-1, as resolve() does), or nullptr outside every recorded module.
  const ModuleCheck* check_at(uint64_t addr) const;

  // False when libdw could not be initialised (then everything is a placeholder).
  bool ok() const { return dwfl_ != nullptr; }

  // Number of addresses in the cache.
  size_t cached() const { return cache_.size(); }
  // Number of modules whose symbol table has been indexed.
  size_t symbol_indexes() const;

  struct ModuleRec;  // internal; public only for libdwfl's C callbacks

 private:
  ModuleRec* find(uint64_t pc) const;
  void resolve_in(ModuleRec* rec, uint64_t addr, uint64_t pc, std::vector<Frame>& out);
  // Opens a module's file at its first lookup and reports it to libdwfl.
  void open(ModuleRec* rec);
  void report(ModuleRec* rec);  // between dwfl_report_begin_add and dwfl_report_end
  // The symbol-table name at pc: from the last prepare(), else from the index (built now).
  const char* symbol_name(ModuleRec* rec, uint64_t pc);
  bool loader_changed() const;

  Options options_;
  bool offline_ = false;
  std::vector<ModuleCheck> checks_;  // offline: parallel to recs_
  Dwfl* dwfl_ = nullptr;
  std::vector<std::unique_ptr<ModuleRec>> recs_;  // discovery order, never shrinks
  std::map<uint64_t, ModuleRec*> by_start_;       // non-overlapping, newest mapping wins
  std::unordered_map<uint64_t, std::vector<Frame>> cache_;
  uint64_t loader_adds_ = 0;  // dl_iterate_phdr counters at the last refresh
  uint64_t loader_subs_ = 0;
};

}  // namespace d9::symbolize
