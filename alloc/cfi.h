// Unwind tables for the CPU sampler's signal handler, compiled ahead of time from a
// module's .eh_frame (x86-64 only).
//
// The handler cannot run a DWARF interpreter safely: libunwind's lookups take the loader
// lock (dl_iterate_phdr), touch dynamic TLS and, for a module unloaded meanwhile, read
// unmapped memory. So the writer thread interprets every FDE once, when a module appears,
// into a flat sorted array of rows, one per pc range with a distinct rule, and the handler
// only binary-searches memory d9 owns. The same idea as async-profiler's FrameDesc tables.
//
// A row says how to find the caller: CFA = rsp|rbp + offset, the return address at CFA-8
// (x86-64's fixed rule), rbp saved at CFA + fp_offset or left as is. Rules that need a
// DWARF expression or another register are kUnknown: the walker falls back to the frame
// pointer there. kEnd marks the outermost frame (return address undefined: _start, clone).
#pragma once

#include <cstdint>
#include <vector>

namespace d9::cfi {

enum Kind : uint8_t {
  kCfaRsp,   // CFA = rsp + cfa_offset
  kCfaRbp,   // CFA = rbp + cfa_offset
  kPlt,      // PLT stub: CFA = rsp + 8, + 8 more once (pc & 15) >= cfa_offset
  kSignal,   // sigreturn trampoline: the interrupted registers are in the ucontext at rsp
  kEnd,      // outermost frame: the stack is complete here
  kUnknown,  // no usable rule (or no FDE): use the frame pointer
};

struct Row {
  uint32_t pc;         // offset from the module's load base where this rule starts
  int32_t cfa_offset;  // see Kind
  int16_t fp_offset;   // rbp saved at CFA + fp_offset; 0 = rbp unchanged
  uint8_t kind;
  uint8_t unused = 0;
};
static_assert(sizeof(Row) == 12);

// A readable address range of the module ([lo, hi)); every read is checked against them.
struct Range {
  uint64_t lo, hi;
};

// Appends the rows of every FDE listed in the eh_frame_hdr at `hdr` (a PT_GNU_EH_FRAME in
// memory), pcs relative to `base`, sorted, with kUnknown rows closing the gaps between
// functions. Reads only inside `readable`. Returns false (rows may be partial, still
// sorted) if the table is malformed or uses an encoding d9 does not read.
bool build_rows(uint64_t hdr, uint64_t base, const std::vector<Range>& readable,
                std::vector<Row>* rows);

// A module's rows as the handler searches them, with an index by 4 KiB page of pc:
// pages[p] is the row in force at the start of page first_page + p, so a lookup
// binary-searches the few rows of one page instead of the whole module.
struct Table {
  const Row* rows = nullptr;
  uint32_t count = 0;
  const uint32_t* pages = nullptr;
  uint32_t page_count = 0;
  uint32_t first_page = 0;
};

constexpr int kPageShift = 12;

// Fills `pages` for `rows` (sorted) and returns the view of both.
Table index_rows(const std::vector<Row>& rows, std::vector<uint32_t>* pages);

// The row covering `pc` (relative to the module base), or nullptr.
inline const Row* find_row(const Table& t, uint64_t pc) {
  if (t.count == 0 || pc < t.rows[0].pc || pc > UINT32_MAX) return nullptr;
  uint64_t page = (pc >> kPageShift) - t.first_page;
  uint32_t lo = 0, hi = t.count;  // invariant: rows[lo].pc <= pc, answer in [lo, hi)
  if (page < t.page_count) {
    lo = t.pages[page];
    if (page + 1 < t.page_count) hi = t.pages[page + 1] + 1;
  } else {
    lo = t.pages[t.page_count - 1];
  }
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (t.rows[mid].pc <= pc) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return &t.rows[lo];
}

}  // namespace d9::cfi
