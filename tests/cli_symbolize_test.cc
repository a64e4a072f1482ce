// `d9 symbolize` end to end: segments written with D9_SYMBOLIZE=0 (and the `.active` file of
// a SIGKILLed process) get the same symbols offline as libd9 gives in process with
// D9_SYMBOLIZE=full; a module whose file no longer has the recorded build-id is refused with
// a message. With the default D9_SYMBOLIZE=1, modules whose separate debug file is compressed
// (libc6-dbg) are named from its symbol table only.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tests/test_util.h"

namespace d9::test {
namespace {

namespace fs = std::filesystem;

std::string only_segment(const std::string& dir) {
  auto segs = find_segments(dir);
  EXPECT_EQ(segs.size(), 1u) << dir;
  return segs.empty() ? "" : segs[0];
}

// What the golden subject prints: the lines of its two allocation sites.
struct Golden {
  std::string main_file;
  uint64_t main_call = 0, main_helper = 0, dso_call = 0, dso_helper = 0;
};

// `symbolize` is the value of D9_SYMBOLIZE: "0", "1" or "full".
Golden run_golden(const std::string& dir, const std::string& dso, const std::string& symbolize,
                  const std::string& compress = "zstd") {
  RunResult r = run({segments_subject(), "golden", dso, "unload"},
                    {"D9_OUTPUT=" + dir, "D9_SAMPLE_RATE=1", "D9_COMPRESS=" + compress,
                     "D9_SYMBOLIZE=" + symbolize});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  Golden g;
  std::istringstream in(r.out);
  std::string word;
  int n = 0;
  in >> word >> word >> n >> g.main_file >> g.main_call >> g.main_helper;
  in >> word >> word >> n >> g.dso_call >> g.dso_helper;
  EXPECT_GT(g.dso_helper, 0u) << r.out;
  return g;
}

// The leaf chain of a golden site: the noinline function at depth 0 (at the helper's call
// line), the always_inline helper at depth 1 (at the malloc).
void expect_site(const SegmentFile& s, uint64_t size, const std::string& fn,
                 const std::string& helper, const std::string& file, uint64_t call_line,
                 uint64_t helper_line) {
  SCOPED_TRACE(fn);
  uint64_t leaf = s.leaf_of(size);
  ASSERT_NE(leaf, 0u);
  auto it = s.symbols.find(leaf);
  ASSERT_NE(it, s.symbols.end()) << "no symbols for 0x" << std::hex << leaf;
  const auto& chain = it->second;
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0].inline_depth, 0u);
  EXPECT_EQ(chain[0].name, fn);
  EXPECT_EQ(basename_of(std::string(chain[0].file)), file);
  EXPECT_EQ(chain[0].line, call_line);
  EXPECT_EQ(chain[1].inline_depth, 1u);
  EXPECT_EQ(chain[1].name, helper);
  EXPECT_EQ(basename_of(std::string(chain[1].file)), file);
  EXPECT_EQ(chain[1].line, helper_line);
}

// Whether the debug file of a build-id under /usr/lib/debug/.build-id exists and stores its
// .debug_info compressed (SHF_COMPRESSED, as Debian's -dbg packages do).
bool compressed_debug_file(const std::string& build_id_hex) {
  if (build_id_hex.size() < 2) return false;
  std::vector<uint8_t> f = read_bytes("/usr/lib/debug/.build-id/" + build_id_hex.substr(0, 2) +
                                      "/" + build_id_hex.substr(2) + ".debug");
  Elf64_Ehdr eh;
  if (f.size() < sizeof eh || memcmp(f.data(), ELFMAG, SELFMAG) != 0 || f[EI_CLASS] != ELFCLASS64) {
    return false;
  }
  memcpy(&eh, f.data(), sizeof eh);
  auto section = [&](size_t i) {
    Elf64_Shdr sh{};
    size_t at = eh.e_shoff + i * sizeof sh;
    if (at + sizeof sh <= f.size()) memcpy(&sh, f.data() + at, sizeof sh);
    return sh;
  };
  Elf64_Shdr names = section(eh.e_shstrndx);
  const std::string want = ".debug_info";
  for (size_t i = 1; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    size_t at = names.sh_offset + sh.sh_name;
    if (at + want.size() < f.size() && memcmp(f.data() + at, want.c_str(), want.size() + 1) == 0) {
      return (sh.sh_flags & SHF_COMPRESSED) != 0;
    }
  }
  return false;
}

class CliSymbolize : public TempDirTest {
 protected:
  CliSymbolize() : TempDirTest("cli-symbolize") {}
};

TEST_F(CliSymbolize, OfflineSymbolsEqualInProcessOnes) {
  Golden g = run_golden(dir_ + "/inproc", segments_dso(), "full");
  Golden g0 = run_golden(dir_ + "/bare", segments_dso(), "0");
  ASSERT_EQ(g.main_call, g0.main_call);
  SegmentFile inproc = load_segment(only_segment(dir_ + "/inproc"));
  std::string bare_path = only_segment(dir_ + "/bare");
  SegmentFile bare = load_segment(bare_path);
  ASSERT_TRUE(bare.trace.symbols.empty()) << "D9_SYMBOLIZE=0 writes no symbols";
  ASSERT_FALSE(bare.modules.empty()) << "but the module map";

  Shell d9 = shell(d9_binary() + " symbolize " + dir_ + "/bare -o " + dir_ + "/out");
  ASSERT_EQ(d9.status, 0) << d9.err;
  // The process directory is kept under -o; the container follows the input.
  std::string out_path = only_segment(dir_ + "/out");
  EXPECT_EQ(fs::path(out_path).parent_path().filename(),
            fs::path(bare_path).parent_path().filename());
  EXPECT_EQ(basename_of(out_path), "trace.0.bin.zst");
  std::vector<uint8_t> packed = read_bytes(out_path);
  ASSERT_GE(packed.size(), 4u);
  EXPECT_EQ(packed[0], 0x28);  // zstd magic
  EXPECT_EQ(read_bytes(bare_path).size() > 0, true);

  SegmentFile out = load_segment(out_path);
  EXPECT_TRUE(out.trace.ok()) << out.trace.error;
  // The original bytes come first, unchanged; then one more sub-stream.
  ASSERT_GT(out.raw.size(), bare.raw.size());
  EXPECT_TRUE(std::equal(bare.raw.begin(), bare.raw.end(), out.raw.begin()));
  EXPECT_EQ(out.trace.stream_headers, bare.trace.stream_headers + 1);
  EXPECT_EQ(out.trace.allocs, bare.trace.allocs);
  // Every address gets symbols, but those the process could not resolve either (static
  // functions of stripped libraries, such as libstdc++'s start-up code): the same module
  // and offset reads "[unknown] 0x…" in the in-process run.
  std::set<std::pair<std::string, uint64_t>> unknown_inproc;
  for (const auto& [addr, chain] : inproc.symbols) {
    if (chain[0].name.starts_with("[unknown]")) unknown_inproc.insert(inproc.where(addr));
  }
  size_t unresolved = 0;
  for (uint64_t pc : out.callchain_addrs) {
    auto it = out.symbols.find(pc);
    if (it == out.symbols.end()) {
      ++unresolved;
      EXPECT_TRUE(unknown_inproc.count(out.where(pc)))
          << std::hex << "0x" << pc << " (" << out.where(pc).first << " +0x" << out.where(pc).second
          << ") was resolved in process";
      continue;
    }
    for (size_t d = 0; d < it->second.size(); ++d) EXPECT_EQ(it->second[d].inline_depth, d);
  }
  EXPECT_NE(d9.out.find(" " + std::to_string(unresolved) + " unresolved"), std::string::npos)
      << d9.out;

  // The golden sites: names, inline depth and file:line, in the program and in the library
  // it dlclosed before exiting.
  std::string file = basename_of(g0.main_file);
  expect_site(out, 4242, "golden::outer_alloc(unsigned long)",
              "golden::inline_helper(unsigned long)", file, g0.main_call, g0.main_helper);
  expect_site(out, 4343, "segdso::dso_alloc(unsigned long)",
              "segdso::dso_inline_helper(unsigned long)", "segments_dso.cc", g0.dso_call,
              g0.dso_helper);
  expect_site(inproc, 4242, "golden::outer_alloc(unsigned long)",
              "golden::inline_helper(unsigned long)", file, g.main_call, g.main_helper);

  // Every address both runs share (same module, same offset) resolves identically.
  std::map<std::pair<std::string, uint64_t>, const std::vector<decode::SymbolTableEntry>*> ref;
  for (const auto& [addr, chain] : inproc.symbols) ref[inproc.where(addr)] = &chain;
  size_t compared = 0;
  for (const auto& [addr, chain] : out.symbols) {
    auto key = out.where(addr);
    auto it = ref.find(key);
    if (key.first.empty() || it == ref.end()) continue;
    const auto& want = *it->second;
    if (want[0].name.starts_with("[")) continue;  // placeholders carry the absolute address
    ++compared;
    SCOPED_TRACE(key.first + " +0x" + std::to_string(key.second));
    ASSERT_EQ(chain.size(), want.size());
    for (size_t d = 0; d < chain.size(); ++d) {
      EXPECT_EQ(chain[d].name, want[d].name);
      EXPECT_EQ(chain[d].inline_depth, want[d].inline_depth);
      EXPECT_EQ(chain[d].file, want[d].file);
      EXPECT_EQ(chain[d].line, want[d].line);
    }
  }
  EXPECT_GE(compared, 8u) << "main program, library and libc frames";

  // Already symbolized: nothing to do, nothing written.
  Shell again = shell(d9_binary() + " symbolize " + out_path);
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("already symbolized"), std::string::npos) << again.out;
}

// The default D9_SYMBOLIZE=1 differs from full only in modules whose separate debug file is
// compressed: one frame named from its .symtab, the module as file, line 0. Every other
// module (the program and its library carry their own DWARF) resolves exactly as with full.
TEST_F(CliSymbolize, InProcessDefaultNamesModulesWithCompressedDebugFiles) {
  Golden g = run_golden(dir_ + "/default", segments_dso(), "1");
  run_golden(dir_ + "/full", segments_dso(), "full");
  SegmentFile def = load_segment(only_segment(dir_ + "/default"));
  SegmentFile full = load_segment(only_segment(dir_ + "/full"));
  expect_site(def, 4242, "golden::outer_alloc(unsigned long)",
              "golden::inline_helper(unsigned long)", basename_of(g.main_file), g.main_call,
              g.main_helper);

  std::map<std::pair<std::string, uint64_t>, const std::vector<decode::SymbolTableEntry>*> ref;
  for (const auto& [addr, chain] : full.symbols) ref[full.where(addr)] = &chain;
  size_t same = 0, by_name = 0, libc_by_name = 0;
  bool libc_compressed = false;
  for (const auto& [addr, chain] : def.symbols) {
    const SegmentModule* m = def.module_of(addr);
    auto it = ref.find(def.where(addr));
    if (m == nullptr || it == ref.end()) continue;
    const auto& want = *it->second;
    if (want[0].name.starts_with("[")) continue;  // placeholders carry the absolute address
    SCOPED_TRACE(m->path + " +0x" + std::to_string(addr - m->bias));
    bool compressed = compressed_debug_file(m->build_id);
    bool libc = basename_of(m->path) == "libc.so.6";
    libc_compressed |= libc && compressed;
    if (compressed) {
      ++by_name;
      libc_by_name += libc;
      ASSERT_EQ(chain.size(), 1u);
      EXPECT_FALSE(chain[0].name.empty());
      EXPECT_FALSE(chain[0].name.starts_with("[")) << chain[0].name;
      EXPECT_EQ(chain[0].file, m->path);
      EXPECT_EQ(chain[0].line, 0u);
      continue;
    }
    ++same;
    ASSERT_EQ(chain.size(), want.size());
    for (size_t d = 0; d < chain.size(); ++d) {
      EXPECT_EQ(chain[d].name, want[d].name);
      EXPECT_EQ(chain[d].file, want[d].file);
      EXPECT_EQ(chain[d].line, want[d].line);
    }
  }
  EXPECT_GE(same, 4u) << "main program and library frames";
  if (libc_compressed) {
    EXPECT_GT(libc_by_name, 0u);
  }
  std::printf("[          ] %zu addresses as with full, %zu by name only%s\n", same, by_name,
              libc_compressed ? "" : " (no compressed libc debug file installed)");
}

TEST_F(CliSymbolize, NeverReplacesTheInputUnlessInPlaceAndKeepsGzip) {
  run_golden(dir_, segments_dso(), "0", "gzip");
  std::string seg = only_segment(dir_);
  ASSERT_TRUE(seg.ends_with(".bin.gz")) << seg;
  std::vector<uint8_t> before = read_bytes(seg);

  Shell refused = shell(d9_binary() + " symbolize " + seg);
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.err.find("would replace the input; use -o DIR or --in-place"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(read_bytes(seg), before);

  Shell in_place = shell(d9_binary() + " symbolize --in-place " + seg);
  ASSERT_EQ(in_place.status, 0) << in_place.err;
  ASSERT_EQ(only_segment(dir_), seg);
  std::vector<uint8_t> after = read_bytes(seg);
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(after[0], 0x1f);  // still gzip, one member (zlib's gunzip reads it whole)
  EXPECT_EQ(after[1], 0x8b);
  SegmentFile s = load_segment(seg);
  EXPECT_TRUE(s.trace.ok()) << s.trace.error;
  EXPECT_FALSE(s.trace.symbols.empty());
  EXPECT_TRUE(fs::directory_iterator(fs::path(seg).parent_path()) != fs::directory_iterator());
  for (const auto& e : fs::directory_iterator(fs::path(seg).parent_path())) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".")) << "temporary file left";
  }
}

TEST_F(CliSymbolize, BuildIdMismatchIsRefusedWithAMessage) {
  // The subject dlopens a copy of the library; after the run the copy's build-id changes.
  std::string lib = dir_ + "/lib/libsegments_dso.so";
  fs::create_directories(dir_ + "/lib");
  fs::copy_file(segments_dso(), lib);
  Golden g = run_golden(dir_ + "/trace", lib, "0");
  std::string seg = only_segment(dir_ + "/trace");
  SegmentFile bare = load_segment(seg);
  const SegmentModule* m = nullptr;
  for (const SegmentModule& mod : bare.modules) {
    if (fs::weakly_canonical(mod.path) == fs::weakly_canonical(lib)) m = &mod;
  }
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->build_id.size(), 40u);
  std::string id_bytes;
  for (size_t i = 0; i < m->build_id.size(); i += 2) {
    id_bytes += static_cast<char>(std::stoi(m->build_id.substr(i, 2), nullptr, 16));
  }
  std::vector<uint8_t> bytes = read_bytes(lib);
  std::string text(bytes.begin(), bytes.end());
  size_t at = text.find(id_bytes);
  ASSERT_NE(at, std::string::npos);
  text[at + 19] = static_cast<char>(text[at + 19] ^ 0x5a);
  write_bytes(lib, std::vector<uint8_t>(text.begin(), text.end()));

  Shell d9 = shell(d9_binary() + " symbolize " + seg + " -o " + dir_ + "/out");
  ASSERT_EQ(d9.status, 0) << d9.err;  // the program's own frames still resolve
  EXPECT_NE(d9.err.find(lib + ": build-id mismatch (recorded " + m->build_id), std::string::npos)
      << d9.err;
  EXPECT_NE(d9.err.find("refused"), std::string::npos) << d9.err;
  SegmentFile out = load_segment(only_segment(dir_ + "/out"));
  EXPECT_EQ(out.symbols.count(out.leaf_of(4343)), 0u) << "nothing from the refused file";
  expect_site(out, 4242, "golden::outer_alloc(unsigned long)",
              "golden::inline_helper(unsigned long)", basename_of(g.main_file), g.main_call,
              g.main_helper);
}

TEST_F(CliSymbolize, ActiveSegmentOfAKilledProcessUsesASealedSiblingsModuleMap) {
  // No CPU samples: their leaves can sit in code with no symbol at all (libunwind's static
  // functions, while it captures an allocation's stack), which rightly stays unresolved.
  Spawned proc({segments_subject(), "steady", "30", "1"},
               {"D9_OUTPUT=" + dir_ + "/trace", "D9_ROTATE_SECS=1", "D9_SAMPLE_RATE=65536",
                "D9_SYMBOLIZE=0", "D9_CPU_HZ=0"},
               true, "/dev/null");
  ASSERT_GT(proc.pid(), 0);
  // At least one segment sealed by age and the next one being written.
  std::string active;
  for (int i = 0; i < 150 && active.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int sealed = 0;
    std::string a;
    for (const std::string& path : find_segments(dir_ + "/trace")) {
      if (path.ends_with(".active")) {
        a = path;
      } else {
        ++sealed;
      }
    }
    if (sealed >= 1 && !a.empty() && fs::file_size(a) > 4096) active = a;
  }
  proc.stop(SIGKILL, 10000);
  ASSERT_FALSE(active.empty()) << "no sealed segment and active one within 15 s";
  ASSERT_TRUE(fs::exists(active));
  SegmentFile bare = load_segment(active);
  ASSERT_TRUE(bare.modules.empty()) << "an .active file was never sealed";
  ASSERT_FALSE(bare.callchain_addrs.empty());

  // Alone, it cannot be symbolized: said plainly.
  fs::create_directories(dir_ + "/alone");
  std::string alone = dir_ + "/alone/" + basename_of(active);
  fs::copy_file(active, alone);
  Shell lonely = shell(d9_binary() + " symbolize " + alone + " -o " + dir_ + "/alone-out");
  EXPECT_EQ(lonely.status, 1);
  EXPECT_NE(lonely.err.find("no module map: the segment was never sealed"), std::string::npos)
      << lonely.err;

  // Beside its sealed siblings it borrows their module map.
  Shell d9 = shell(d9_binary() + " symbolize " + active + " -o " + dir_ + "/out");
  ASSERT_EQ(d9.status, 0) << d9.err;
  EXPECT_NE(d9.err.find("no module map (never sealed); using the one of "), std::string::npos)
      << d9.err;
  std::string stem = basename_of(active);
  stem.resize(stem.size() - strlen(".active"));  // trace.N.bin
  std::string out_path = dir_ + "/out/" + stem;
  ASSERT_TRUE(fs::exists(out_path)) << d9.out;
  SegmentFile out = load_segment(out_path);
  // Cut after the last whole frame: the output decodes cleanly.
  EXPECT_TRUE(out.trace.ok()) << out.trace.error;
  EXPECT_FALSE(out.modules.empty()) << "the borrowed map travels with the output";
  std::set<std::string> names;
  size_t missing = 0;
  for (uint64_t pc : out.callchain_addrs) {
    auto it = out.symbols.find(pc);
    if (it == out.symbols.end()) {
      ++missing;
      continue;
    }
    names.insert(std::string(it->second[0].name));
  }
  EXPECT_EQ(missing, 0u) << d9.out << d9.err;
  EXPECT_TRUE(names.count("steady_leaf(unsigned long)")) << ::testing::PrintToString(names);
  EXPECT_TRUE(names.count("steady_depth(int, unsigned long)")) << ::testing::PrintToString(names);

  // --in-place turns the .active into its .bin, as the seal would have.
  Shell in_place = shell(d9_binary() + " symbolize --in-place " + active);
  ASSERT_EQ(in_place.status, 0) << in_place.err;
  EXPECT_FALSE(fs::exists(active));
  std::string sealed = fs::path(active).parent_path() / stem;
  ASSERT_TRUE(fs::exists(sealed));
  EXPECT_FALSE(load_segment(sealed).trace.symbols.empty());
}

}  // namespace
}  // namespace d9::test
