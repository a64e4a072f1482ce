// Golden tests of the symbolizer: every expected function name, depth, file and line comes
// from subjects built by this suite (subject_exe.cc linked in, symtest_dso.cc as shared
// libraries), with lines reported by the subjects through __LINE__.
#include "symbolize/symbolizer.h"

#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/symbolize/subject_exe.h"

// Counts libelf's inflate streams: libdw opens each compressed debug section with one.
// Exported from the test executable (see CMakeLists.txt), so it comes before zlib's.
static int g_inflate_inits = 0;
extern "C" int inflateInit_(z_streamp strm, const char* version, int stream_size) {
  using Fn = int (*)(z_streamp, const char*, int);
  static Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "inflateInit_"));
  ++g_inflate_inits;
  return next(strm, version, stream_size);
}

namespace d9::symbolize {
namespace {

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string LibPath(const std::string& variant) {
  return std::string(SYMTEST_LIB_DIR) + "/libsymtest_" + variant + ".so";
}

// Readable dump of a resolution, for failure messages.
std::string Dump(const std::vector<Frame>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    out += "  [" + std::to_string(i) + "] " + frames[i].function + " at " + frames[i].file + ":" +
           std::to_string(frames[i].line) + "\n";
  }
  return out;
}

const Module* FindModule(const std::vector<Module>& modules, const std::string& path) {
  for (const Module& m : modules) {
    if (m.path == path) return &m;
  }
  return nullptr;
}

int CountFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

// A symtest library loaded with dlopen, its probes filled.
struct Library {
  // A symtest variant ("dso"), or the path of a copy of one.
  explicit Library(const std::string& variant)
      : path(variant[0] == '/' ? variant : LibPath(variant)) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;
    auto fill = reinterpret_cast<SymtestDsoFill>(dlsym(handle, "symtest_dso_fill"));
    if (fill != nullptr) fill(&probes);
  }
  ~Library() { close(); }
  // dlclose, and true when the object is really gone from the process.
  bool close() {
    if (handle == nullptr) return true;
    dlclose(handle);
    handle = nullptr;
    void* again = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (again == nullptr) return true;
    dlclose(again);
    return false;
  }
  std::string path;
  void* handle = nullptr;
  SymtestDsoProbes probes;
};

// Expects the probes of a library built with DWARF (directly or split) in namespace `ns`.
void ExpectDwarfProbes(Symbolizer& s, const SymtestDsoProbes& p, const std::string& ns) {
  const std::vector<Frame>& chain = s.resolve(p.chain.leaf.addr);
  ASSERT_EQ(chain.size(), 2u) << Dump(chain);
  EXPECT_EQ(chain[0].function, ns + "::dso_outer(SymtestChain*)");
  EXPECT_EQ(chain[0].file, SYMTEST_DSO_SOURCE);
  EXPECT_EQ(chain[0].line, static_cast<uint32_t>(p.chain.call_mid_line));
  EXPECT_EQ(chain[1].function, ns + "::dso_inlined(SymtestChain*, int)");
  EXPECT_EQ(chain[1].file, SYMTEST_DSO_SOURCE);
  EXPECT_EQ(chain[1].line, static_cast<uint32_t>(p.chain.leaf.line));

  const std::vector<Frame>& direct = s.resolve(p.direct.addr);
  ASSERT_EQ(direct.size(), 1u) << Dump(direct);
  EXPECT_EQ(direct[0].function, ns + "::dso_direct(SymtestProbe*)");
  EXPECT_EQ(Basename(direct[0].file), "symtest_dso.cc");
  EXPECT_EQ(direct[0].line, static_cast<uint32_t>(p.direct.line));

  const std::vector<Frame>& local = s.resolve(p.local_function);
  ASSERT_EQ(local.size(), 1u) << Dump(local);
  EXPECT_EQ(local[0].function, ns + "::dso_local(int)");

  const std::vector<Frame>& exported = s.resolve(p.exported.addr);
  ASSERT_EQ(exported.size(), 1u) << Dump(exported);
  EXPECT_EQ(exported[0].function, ns + "::Widget::probe(SymtestProbe*)");
  EXPECT_EQ(exported[0].line, static_cast<uint32_t>(p.exported.line));
}

TEST(Symbolizer, InlineChainInExecutable) {
  SymtestChain c;
  symtest::outer_fn(&c);
  Symbolizer s;
  const std::vector<Frame>& f = s.resolve(c.leaf.addr);
  ASSERT_EQ(f.size(), 3u) << Dump(f);
  EXPECT_EQ(f[0].function, "symtest::outer_fn(SymtestChain*)");
  EXPECT_EQ(f[0].file, SYMTEST_SUBJECT_SOURCE);
  EXPECT_EQ(f[0].line, static_cast<uint32_t>(c.call_mid_line));
  EXPECT_EQ(f[1].function, "symtest::mid_fn(SymtestChain*, int)");
  EXPECT_EQ(f[1].file, SYMTEST_SUBJECT_SOURCE);
  EXPECT_EQ(f[1].line, static_cast<uint32_t>(c.call_inner_line));
  EXPECT_EQ(f[2].function, "symtest::inner_fn(SymtestChain*, int)");
  EXPECT_EQ(f[2].file, SYMTEST_SUBJECT_SOURCE);
  EXPECT_EQ(f[2].line, static_cast<uint32_t>(c.leaf.line));
  // Sanity of the markers themselves: three distinct, increasing lines.
  EXPECT_LT(c.leaf.line, c.call_inner_line);
  EXPECT_LT(c.call_inner_line, c.call_mid_line);
}

TEST(Symbolizer, DemanglesMethod) {
  ns::Klass k;
  EXPECT_EQ(k.method(1), 2);
  Symbolizer s;
  const std::vector<Frame>& f = s.resolve(k.probe.addr);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].function, "ns::Klass::method(int)");
  EXPECT_EQ(Basename(f[0].file), "subject_exe.cc");
  EXPECT_EQ(f[0].line, static_cast<uint32_t>(k.probe.line));
}

// An inlined function without a linkage name is named by the namespaces and classes around
// its declaration, down through nested classes.
TEST(Symbolizer, QualifiesFunctionsWithoutLinkageName) {
  SymtestProbe p;
  symtest::internal_fn(&p);
  Symbolizer s;
  const std::vector<Frame>& f = s.resolve(p.addr);
  ASSERT_EQ(f.size(), 2u) << Dump(f);
  EXPECT_EQ(f[0].function, "symtest::internal_fn(SymtestProbe*)");
  EXPECT_EQ(f[1].function, "symtest::(anonymous namespace)::Outer::Inner::probe");
  EXPECT_EQ(Basename(f[1].file), "subject_exe.cc");
  EXPECT_EQ(f[1].line, static_cast<uint32_t>(p.line));
}

TEST(Symbolizer, CachesByAddress) {
  SymtestChain c;
  symtest::outer_fn(&c);
  Symbolizer s;
  EXPECT_EQ(s.cached(), 0u);
  const std::vector<Frame>& a = s.resolve(c.leaf.addr);
  const std::vector<Frame>& b = s.resolve(c.leaf.addr);
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(s.cached(), 1u);
  // The return address one past the call resolves to the call; the address of the call's
  // own first byte plus one does too, and is a distinct key.
  const std::vector<Frame>& c2 = s.resolve(c.leaf.addr - 1);
  EXPECT_EQ(s.cached(), 2u);
  ASSERT_EQ(c2.size(), 3u) << Dump(c2);
  EXPECT_EQ(c2[2].line, static_cast<uint32_t>(c.leaf.line));
}

// Return addresses just past the first bytes of libc functions.
std::vector<uint64_t> LibcAddresses(uint64_t offset) {
  std::vector<uint64_t> out;
  for (void* fn : {reinterpret_cast<void*>(&fopen), reinterpret_cast<void*>(&qsort),
                   reinterpret_cast<void*>(&strtol), reinterpret_cast<void*>(&getpid),
                   reinterpret_cast<void*>(&opendir), reinterpret_cast<void*>(&snprintf)}) {
    out.push_back(reinterpret_cast<uint64_t>(fn) + offset);
  }
  return out;
}

TEST(Symbolizer, PreparedBatchesResolveAsTheIndexDoes) {
  Library stripped("stripped");
  ASSERT_NE(stripped.handle, nullptr) << dlerror();
  // As in libd9: libc6-dbg's compressed DWARF left unread, names from its symbol table.
  const Options names{.inflate_compressed_debug_files = false};
  Symbolizer batched(names), indexed(names);
  for (uint64_t offset : {1, 2, 3}) {
    std::vector<uint64_t> addrs = LibcAddresses(offset);
    if (offset == 1) addrs.push_back(stripped.probes.direct.addr);  // .dynsym only
    batched.prepare(addrs);
    for (uint64_t addr : addrs) {
      const std::vector<Frame>& want = indexed.resolve(addr);
      const std::vector<Frame>& got = batched.resolve(addr);
      ASSERT_EQ(got.size(), 1u) << Dump(got);
      EXPECT_EQ(got[0].function, want[0].function) << Hex(addr);
      EXPECT_EQ(got[0].function.find("[unknown]"), std::string::npos) << Hex(addr);
    }
    // One pass over each table for the first two batches; the third builds the indexes:
    // libc's (and, under ASan, that of libasan, whose interceptors these functions are),
    // not the stripped library's, which had one batch only.
    EXPECT_EQ(batched.symbol_indexes(), offset == 3 ? indexed.symbol_indexes() - 1 : 0u) << offset;
  }
  EXPECT_GE(indexed.symbol_indexes(), 2u);  // libc and the stripped library
}

TEST(Symbolizer, Placeholders) {
  Symbolizer s;
  const std::vector<Frame>& kernel = s.resolve(0xffffffff81000010ull);
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0].function, "[kernel] 0xffffffff81000010");
  EXPECT_EQ(kernel[0].file, "kernel");
  EXPECT_EQ(kernel[0].line, 0u);

  const std::vector<Frame>& nowhere = s.resolve(0x10);
  ASSERT_EQ(nowhere.size(), 1u);
  EXPECT_EQ(nowhere[0].function, "[unknown] 0x10");
  EXPECT_EQ(nowhere[0].file, "");
  EXPECT_EQ(nowhere[0].line, 0u);

  const std::vector<Frame>& zero = s.resolve(0);
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0].function, "[unknown] 0x0");
}

TEST(Symbolizer, ModuleMap) {
  Symbolizer s;
  std::vector<Module> modules = s.modules();
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  const Module* main = FindModule(modules, std::string(exe, static_cast<size_t>(n)));
  ASSERT_NE(main, nullptr);
  EXPECT_TRUE(main->loaded);
  EXPECT_EQ(main->build_id_hex.size(), 40u);  // GNU ld's default sha1 build-id
  uint64_t here = reinterpret_cast<uint64_t>(&symtest::outer_fn);
  EXPECT_LE(main->start, here);
  EXPECT_LT(here, main->end);
  EXPECT_EQ(main->start % 4096, 0u);

  // libc, found by its loader name, and the vDSO with a readable image.
  bool libc = false;
  for (const Module& m : modules) libc |= Basename(m.path) == "libc.so.6";
  EXPECT_TRUE(libc);
  const Module* vdso = FindModule(modules, "[vdso]");
  ASSERT_NE(vdso, nullptr);
  bool clock_gettime = false;
  for (uint64_t a = vdso->start + 1; a < vdso->end && !clock_gettime; a += 4) {
    const std::vector<Frame>& f = s.resolve(a);
    clock_gettime = f[0].function.find("clock_gettime") != std::string::npos;
    if (clock_gettime) {
      EXPECT_EQ(f[0].file, "[vdso]");
    }
  }
  EXPECT_TRUE(clock_gettime);
}

// Module files, separate debug files included, are closed once read: libdwfl would keep
// descriptors open for the session, and close them at the end whatever they have become.
// Nor is a debuginfod client started for modules without debug info (its curl handle keeps
// a socket pair open).
TEST(Symbolizer, HoldsNoDescriptors) {
  SymtestChain c;
  symtest::outer_fn(&c);
  void* libc_fn = dlsym(RTLD_DEFAULT, "fopen");
  ASSERT_NE(libc_fn, nullptr);
  Library split("split");
  ASSERT_NE(split.handle, nullptr) << dlerror();
  Library stripped("stripped");
  ASSERT_NE(stripped.handle, nullptr) << dlerror();
  int before = CountFds();
  {
    Symbolizer s;
    ASSERT_EQ(s.resolve(c.leaf.addr).size(), 3u);
    const std::string libc_name = s.resolve(reinterpret_cast<uint64_t>(libc_fn) + 1)[0].function;
    EXPECT_NE(libc_name.find("fopen"), std::string::npos) << libc_name;
    EXPECT_EQ(libc_name.find('@'), std::string::npos) << libc_name;
    EXPECT_EQ(s.resolve(split.probes.chain.leaf.addr).size(), 2u);
    EXPECT_EQ(s.resolve(stripped.probes.exported.addr)[0].line, 0u);
    EXPECT_EQ(CountFds(), before);
  }
  EXPECT_EQ(CountFds(), before);
}

TEST(Symbolizer, DlopenThenDlclose) {
  Symbolizer s;  // before the library exists in the process
  Library lib("dso");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  s.refresh_modules();
  std::vector<Module> before = s.modules();
  const Module* m = FindModule(before, lib.path);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->loaded);
  EXPECT_FALSE(m->build_id_hex.empty());

  // Part resolved while loaded, part only after dlclose.
  const std::vector<Frame> chain = s.resolve(lib.probes.chain.leaf.addr);
  ASSERT_EQ(chain.size(), 2u) << Dump(chain);
  ASSERT_TRUE(lib.close()) << "libsymtest_dso.so is still loaded";
  s.refresh_modules();
  std::vector<Module> after = s.modules();
  m = FindModule(after, lib.path);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->loaded);
  ExpectDwarfProbes(s, lib.probes, "symtest_dso");
  EXPECT_EQ(s.resolve(lib.probes.chain.leaf.addr)[0].function, chain[0].function);
}

TEST(Symbolizer, PicksUpNewModulesOnItsOwn) {
  Symbolizer s;
  Library lib("dso");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  // No refresh_modules(): an address outside every known module triggers one.
  ExpectDwarfProbes(s, lib.probes, "symtest_dso");
}

TEST(Symbolizer, SeparateDebugInfo) {
  struct stat st;
  ASSERT_EQ(stat((LibPath("split") + ".debug").c_str(), &st), 0);
  Library lib("split");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  Symbolizer s;
  ExpectDwarfProbes(s, lib.probes, "symtest_split");
}

// A separate debug file with compressed sections: unless asked, resolved by name from its
// .symtab only, with nothing inflated; the static function still has its name there.
TEST(Symbolizer, CompressedSeparateDebugInfoByName) {
  struct stat st;
  ASSERT_EQ(stat((LibPath("split_z") + ".debug").c_str(), &st), 0);
  Library lib("split_z");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  const SymtestDsoProbes& p = lib.probes;
  int inits = g_inflate_inits;
  Symbolizer s(Options{.inflate_compressed_debug_files = false});
  struct Want {
    uint64_t addr;
    std::string function;
  };
  for (const Want& w : {Want{p.chain.leaf.addr, "symtest_split_z::dso_outer(SymtestChain*)"},
                        Want{p.direct.addr, "symtest_split_z::dso_direct(SymtestProbe*)"},
                        Want{p.local_function, "symtest_split_z::dso_local(int)"},
                        Want{p.exported.addr, "symtest_split_z::Widget::probe(SymtestProbe*)"}}) {
    const std::vector<Frame>& f = s.resolve(w.addr);
    ASSERT_EQ(f.size(), 1u) << Dump(f);
    EXPECT_EQ(f[0].function, w.function);
    EXPECT_EQ(f[0].file, lib.path);
    EXPECT_EQ(f[0].line, 0u);
  }
  EXPECT_EQ(g_inflate_inits, inits) << "compressed DWARF was opened";
}

// Asked for (the default, as offline), the compressed debug file gives full DWARF.
TEST(Symbolizer, CompressedSeparateDebugInfoInflated) {
  Library lib("split_z");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  int inits = g_inflate_inits;
  Symbolizer s;
  ExpectDwarfProbes(s, lib.probes, "symtest_split_z");
  EXPECT_GT(g_inflate_inits, inits) << "the inflate counter saw nothing";
}

// An uncompressed debug file is read in full either way.
TEST(Symbolizer, UncompressedSeparateDebugInfoAlwaysRead) {
  Library lib("split");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  Symbolizer s(Options{.inflate_compressed_debug_files = false});
  ExpectDwarfProbes(s, lib.probes, "symtest_split");
}

// So is compressed DWARF in the library itself (-gz): the user's own build.
TEST(Symbolizer, CompressedDwarfInTheLibraryAlwaysRead) {
  Library lib("gz");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  int inits = g_inflate_inits;
  Symbolizer s(Options{.inflate_compressed_debug_files = false});
  ExpectDwarfProbes(s, lib.probes, "symtest_gz");
  EXPECT_GT(g_inflate_inits, inits) << "libsymtest_gz.so's DWARF is not compressed";
}

TEST(Symbolizer, StrippedLibrary) {
  Library lib("stripped");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  Symbolizer s;
  // Exported functions: named from .dynsym (demangled), no source, the library as file.
  const std::vector<Frame>& exported = s.resolve(lib.probes.exported.addr);
  ASSERT_EQ(exported.size(), 1u) << Dump(exported);
  EXPECT_EQ(exported[0].function, "symtest_stripped::Widget::probe(SymtestProbe*)");
  EXPECT_EQ(exported[0].file, lib.path);
  EXPECT_EQ(exported[0].line, 0u);
  const std::vector<Frame>& outer = s.resolve(lib.probes.chain.leaf.addr);
  ASSERT_EQ(outer.size(), 1u) << Dump(outer);
  EXPECT_EQ(outer[0].function, "symtest_stripped::dso_outer(SymtestChain*)");
  // A static function has no symbol left: placeholder with the library as file.
  const std::vector<Frame>& local = s.resolve(lib.probes.local_function);
  ASSERT_EQ(local.size(), 1u) << Dump(local);
  EXPECT_EQ(local[0].function, "[unknown] " + Hex(lib.probes.local_function));
  EXPECT_EQ(local[0].file, lib.path);
  EXPECT_EQ(local[0].line, 0u);
}

// Loads copies of two symtest libraries, refreshes `s` `refreshes` times, unloads them,
// then replaces the second file with another build (another build-id). Returns their probes.
std::pair<SymtestDsoProbes, SymtestDsoProbes> LoadThenReplace(Symbolizer& s, const std::string& dir,
                                                              int refreshes,
                                                              bool open_all = false) {
  auto copy = [](const std::string& from, const std::string& to) {
    EXPECT_EQ(std::system(("cp " + from + " " + to).c_str()), 0);
  };
  const std::string kept = dir + "/libkept.so", replaced = dir + "/libreplaced.so";
  copy(LibPath("dso"), kept);
  copy(LibPath("split"), replaced);
  Library a(kept), b(replaced);
  EXPECT_NE(a.handle, nullptr) << dlerror();
  EXPECT_NE(b.handle, nullptr) << dlerror();
  for (int i = 0; i < refreshes; ++i) s.refresh_modules(open_all);
  EXPECT_TRUE(a.close());
  EXPECT_TRUE(b.close());
  EXPECT_EQ(unlink(replaced.c_str()), 0);
  copy(LibPath("reuse"), replaced);
  return {a.probes, b.probes};
}

// A module's file is read at the first lookup in it: one unloaded before any lookup is read
// then, and a file replaced in the meantime is refused, not misread.
TEST(Symbolizer, OpensModulesAtTheirFirstLookup) {
  char dir[] = "/tmp/d9-symtest-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Symbolizer s;
  auto [kept, replaced] = LoadThenReplace(s, dir, 2);
  EXPECT_EQ(s.resolve(kept.direct.addr)[0].function, "symtest_dso::dso_direct(SymtestProbe*)");
  const std::vector<Frame>& f = s.resolve(replaced.direct.addr);
  ASSERT_EQ(f.size(), 1u) << Dump(f);
  EXPECT_EQ(f[0].function.rfind("[unknown] ", 0), 0u) << Dump(f);
  EXPECT_EQ(f[0].file, std::string(dir) + "/libreplaced.so");
  std::system(("rm -rf " + std::string(dir)).c_str());
}

// ...or by a refresh Options::open_after_ms after it was noted (here at once): a
// long-running process has read its objects before they can be replaced.
TEST(Symbolizer, OpensModulesAtALaterRefresh) {
  char dir[] = "/tmp/d9-symtest-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Symbolizer s(Options{.open_after_ms = 0});
  auto [kept, replaced] = LoadThenReplace(s, dir, 2);  // noted, then read
  EXPECT_EQ(s.resolve(kept.direct.addr)[0].function, "symtest_dso::dso_direct(SymtestProbe*)");
  EXPECT_EQ(s.resolve(replaced.direct.addr)[0].function,
            "symtest_split::dso_direct(SymtestProbe*)");
  std::system(("rm -rf " + std::string(dir)).c_str());
}

// ...or at once when asked (before a dlclose, before forks).
TEST(Symbolizer, OpensEveryModuleWhenAsked) {
  char dir[] = "/tmp/d9-symtest-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Symbolizer s;
  auto [kept, replaced] = LoadThenReplace(s, dir, 1, true);
  EXPECT_EQ(s.resolve(replaced.direct.addr)[0].function,
            "symtest_split::dso_direct(SymtestProbe*)");
  std::system(("rm -rf " + std::string(dir)).c_str());
}

TEST(Symbolizer, RangeReusedAfterDlclose) {
  Symbolizer s;
  Library first("dso");
  ASSERT_NE(first.handle, nullptr) << dlerror();
  SymtestDsoProbes old = first.probes;
  s.refresh_modules();
  EXPECT_EQ(s.resolve(old.direct.addr)[0].function, "symtest_dso::dso_direct(SymtestProbe*)");
  const Module dso = *FindModule(s.modules(), first.path);
  ASSERT_TRUE(first.close());

  Library second("reuse");  // same layout: the loader usually picks the same addresses
  ASSERT_NE(second.handle, nullptr) << dlerror();
  s.refresh_modules();
  const Module reuse = *FindModule(s.modules(), second.path);
  bool overlap = reuse.start < dso.end && dso.start < reuse.end;
  // The newest mapping wins, including over answers cached from the old one.
  ExpectDwarfProbes(s, second.probes, "symtest_reuse");
  const std::vector<Frame>& f = s.resolve(old.direct.addr);
  if (overlap) {
    EXPECT_EQ(f[0].function.rfind("symtest_reuse::", 0), 0u) << Dump(f);
  } else {
    EXPECT_EQ(f[0].function, "symtest_dso::dso_direct(SymtestProbe*)");
  }
  std::printf("[          ] address range %s after dlclose\n", overlap ? "reused" : "not reused");
  EXPECT_FALSE(FindModule(s.modules(), first.path)->loaded);
}

// Only when the test runs with DEBUGINFOD_URLS set (see CMakeLists.txt): libdw then has a
// debuginfod client, and a library without debug info would be looked up on the server.
TEST(Symbolizer, NoDebuginfodUnlessAsked) {
  const char* urls = getenv("DEBUGINFOD_URLS");
  if (urls == nullptr || urls[0] == '\0') GTEST_SKIP() << "DEBUGINFOD_URLS not set";
  char dir_template[] = "/tmp/d9-debuginfod-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string cache = std::string(dir_template) + "/cache";
  setenv("DEBUGINFOD_CACHE_PATH", cache.c_str(), 1);
  Library lib("stripped");
  ASSERT_NE(lib.handle, nullptr) << dlerror();
  struct stat st;
  {
    Symbolizer s;
    EXPECT_EQ(s.resolve(lib.probes.exported.addr)[0].function,
              "symtest_stripped::Widget::probe(SymtestProbe*)");
    EXPECT_NE(stat(cache.c_str(), &st), 0) << "debuginfod was queried";
  }
  {
    // Asked for: the client runs (and fails against the unreachable server).
    Symbolizer s(Options{.debuginfod = true});
    EXPECT_EQ(s.resolve(lib.probes.exported.addr)[0].function,
              "symtest_stripped::Widget::probe(SymtestProbe*)");
    EXPECT_EQ(stat(cache.c_str(), &st), 0) << "debuginfod was not queried";
  }
  unsetenv("DEBUGINFOD_CACHE_PATH");
  std::string cmd = "rm -rf " + std::string(dir_template);
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace d9::symbolize
