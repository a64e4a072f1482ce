// SymbolIndex and SymbolIndex::find_once against a brute-force reading of the rules in
// symbol_index.h, on the real symbol tables of every module loaded in this test (libc's
// full .symtab when libc6-dbg is installed, libstdc++, libm, ld.so, the vDSO, the test).
// The addresses probed are the edges and middles of symbols, where overlaps, aliases and
// sizeless symbols decide the answer.
#include "symbolize/symbol_index.h"

#include <elfutils/libdwfl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace d9::symbolize {
namespace {

struct RefSym {
  uint64_t lo, hi;  // sizeless: up to the end of its section, or the next symbol's start
  const char* name;
  int order;
  bool sized;
  int binding;
};

// The module's code symbols, read the plain way.
std::vector<RefSym> ReadSymbols(Dwfl_Module* mod) {
  std::vector<RefSym> syms;
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    Elf* elf = nullptr;
    Dwarf_Addr bias = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &bias);
    if (name == nullptr || *name == '\0' || shndx == SHN_UNDEF || shndx == SHN_ABS || addr == 0) {
      continue;
    }
    int type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
    int bind = GELF_ST_BIND(sym.st_info);
    uint64_t hi = addr + sym.st_size;
    if (sym.st_size == 0) {
      GElf_Shdr shdr;
      if (gelf_getshdr(elf_getscn(elf, shndx), &shdr) == nullptr) continue;
      hi = shdr.sh_addr + shdr.sh_size + bias;
      if (hi <= addr) continue;
    }
    syms.push_back({addr, hi, name, i, sym.st_size != 0,
                    bind == STB_GLOBAL ? 0
                    : bind == STB_WEAK ? 1
                                       : 2});
  }
  std::vector<uint64_t> starts;
  for (const RefSym& s : syms) starts.push_back(s.lo);
  std::sort(starts.begin(), starts.end());
  for (RefSym& s : syms) {
    auto next = std::upper_bound(starts.begin(), starts.end(), s.lo);
    if (!s.sized && next != starts.end()) s.hi = std::min(s.hi, *next);
  }
  return syms;
}

const char* BruteForce(const std::vector<RefSym>& syms, uint64_t addr) {
  const RefSym* best = nullptr;
  auto rank = [](const RefSym& s) {
    return std::make_tuple(!s.sized, s.sized ? s.hi - s.lo : 0, s.binding, s.lo, s.order);
  };
  for (const RefSym& s : syms) {
    if (s.lo <= addr && addr < s.hi && (best == nullptr || rank(s) < rank(*best))) best = &s;
  }
  return best != nullptr ? best->name : nullptr;
}

std::string Show(const char* name) {
  return name != nullptr ? name : "(none)";
}

struct Checked {
  int modules = 0;
  size_t addresses = 0;
  size_t named = 0;
};

int CheckModule(Dwfl_Module* mod, void**, const char* module_name, Dwarf_Addr, void* arg) {
  auto* checked = static_cast<Checked*>(arg);
  std::vector<RefSym> syms = ReadSymbols(mod);
  if (syms.empty()) return DWARF_CB_OK;
  ++checked->modules;
  // Edges and middles of up to ~1500 symbols spread over the table.
  std::vector<uint64_t> addrs;
  size_t step = std::max<size_t>(1, syms.size() / 1500);
  for (size_t i = 0; i < syms.size(); i += step) {
    const RefSym& s = syms[i];
    for (uint64_t a : {s.lo - 1, s.lo, s.lo + (s.hi - s.lo) / 2, s.hi - 1, s.hi})
      addrs.push_back(a);
  }
  std::sort(addrs.begin(), addrs.end());
  addrs.erase(std::unique(addrs.begin(), addrs.end()), addrs.end());

  SymbolIndex index(mod);
  std::vector<const char*> once = SymbolIndex::find_once(mod, addrs);
  EXPECT_EQ(once.size(), addrs.size());
  int mismatches = 0;
  for (size_t j = 0; j < addrs.size() && mismatches < 10; ++j) {
    const char* want = BruteForce(syms, addrs[j]);
    const char* got = index.find(addrs[j]);
    if (want != nullptr) ++checked->named;
    if (want != got || once[j] != want) {
      ++mismatches;
      ADD_FAILURE() << module_name << " at 0x" << std::hex << addrs[j] << ": want " << Show(want)
                    << ", index " << Show(got) << ", find_once " << Show(once[j]);
    }
  }
  checked->addresses += addrs.size();
  return DWARF_CB_OK;
}

TEST(SymbolIndex, AgreesWithTheRulesOnEveryLoadedModule) {
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo,
                                           nullptr, &debuginfo_path};
  Dwfl* dwfl = dwfl_begin(&callbacks);
  ASSERT_NE(dwfl, nullptr);
  ASSERT_EQ(dwfl_linux_proc_report(dwfl, getpid()), 0);
  ASSERT_EQ(dwfl_report_end(dwfl, nullptr, nullptr), 0);
  Checked checked;
  dwfl_getmodules(dwfl, CheckModule, &checked, 0);
  dwfl_end(dwfl);
  // The test itself, libc, libstdc++, libm, libgcc_s, libdw, libelf, ld.so at least.
  EXPECT_GE(checked.modules, 6);
  EXPECT_GT(checked.named, checked.addresses / 2);
  printf("%d modules, %zu addresses, %zu named\n", checked.modules, checked.addresses,
         checked.named);
}

TEST(SymbolIndex, FindOnceOfNothing) {
  EXPECT_TRUE(SymbolIndex::find_once(nullptr, {}).empty());
}

}  // namespace
}  // namespace d9::symbolize
