#include "alloc/cfi.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <unordered_map>

namespace d9::cfi {
namespace {

// DWARF register numbers on x86-64.
constexpr uint64_t kRbp = 6, kRsp = 7, kRa = 16;

// Reads a module's memory, never past the end of the range the cursor started in.
class Cursor {
 public:
  Cursor(uint64_t at, uint64_t end) : at_(at), end_(end) {}
  uint64_t at() const { return at_; }
  bool ok() const { return ok_; }
  void fail() { ok_ = false; }
  void seek(uint64_t to) {
    if (to > end_) fail();
    at_ = ok_ ? to : end_;
  }
  void skip(uint64_t n) { seek(n <= end_ - at_ ? at_ + n : end_ + 1); }

  template <class T>
  T fixed() {
    T v{};
    if (sizeof(T) > end_ - at_) {
      fail();
      at_ = end_;
      return v;
    }
    memcpy(&v, reinterpret_cast<const void*>(at_), sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  uint8_t u8() { return fixed<uint8_t>(); }
  uint64_t uleb() {
    uint64_t v = 0;
    for (int shift = 0; ok_; shift += 7) {
      uint8_t b = u8();
      if (shift < 64) v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  }
  int64_t sleb() {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b = 0;
    do {
      b = u8();
      if (shift < 64) v |= uint64_t{b & 0x7fu} << shift;
      shift += 7;
    } while ((b & 0x80) && ok_);
    if (shift < 64 && (b & 0x40)) v |= ~uint64_t{0} << shift;
    return static_cast<int64_t>(v);
  }

  // A pointer in DW_EH_PE encoding `enc`. `apply` adds the pc-relative or data-relative
  // base; without it (FDE address ranges) only the value is read.
  uint64_t encoded(uint8_t enc, uint64_t data_base, bool apply = true) {
    if (enc == 0xff) return 0;  // DW_EH_PE_omit
    uint64_t field = at_;
    uint64_t v = 0;
    switch (enc & 0x0f) {
      case 0x00:
        v = fixed<uint64_t>();
        break;
      case 0x01:
        v = uleb();
        break;
      case 0x02:
        v = fixed<uint16_t>();
        break;
      case 0x03:
        v = fixed<uint32_t>();
        break;
      case 0x04:
        v = fixed<uint64_t>();
        break;
      case 0x09:
        v = static_cast<uint64_t>(sleb());
        break;
      case 0x0a:
        v = static_cast<uint64_t>(int64_t{fixed<int16_t>()});
        break;
      case 0x0b:
        v = static_cast<uint64_t>(int64_t{fixed<int32_t>()});
        break;
      case 0x0c:
        v = fixed<uint64_t>();
        break;
      default:
        fail();
        return 0;
    }
    if (!apply) return v;
    switch (enc & 0x70) {
      case 0x00:
        break;
      case 0x10:
        v += field;
        break;  // pcrel
      case 0x30:
        v += data_base;
        break;  // datarel
      default:
        fail();
        return 0;  // textrel, funcrel, aligned: not used on x86-64
    }
    if (enc & 0x80) fail();  // indirect: only personality pointers, which are skipped
    return v;
  }

 private:
  uint64_t at_, end_;
  bool ok_ = true;
};

// The rule for one register, as far as the walker cares.
struct Rule {
  enum Type : uint8_t { kSame, kUndefined, kOffset, kOther } type = kSame;
  int64_t offset = 0;
};

struct State {
  uint64_t cfa_reg = ~uint64_t{0};
  int64_t cfa_offset = 0;
  bool cfa_expr = false;
  int plt_threshold = 0;  // for the PLT's CFA expression (0: some other expression)
  Rule fp, ra;
};

struct Cie {
  uint64_t code_align = 1;
  int64_t data_align = -8;
  uint8_t fde_enc = 0;
  bool has_aug_data = false;
  bool signal_frame = false;
  uint64_t insns = 0, insns_end = 0;
  // The state after the initial instructions, which every FDE of this CIE starts from
  // (worked out for the first FDE; `initial_ok` false: work it out for each).
  bool initial_known = false, initial_ok = false;
  State initial;
};

class Builder {
 public:
  Builder(uint64_t base, const std::vector<Range>& readable, std::vector<Row>* rows)
      : base_(base), readable_(readable), rows_(rows) {}

  // A cursor over the readable range holding `at` (failed if there is none).
  Cursor cursor(uint64_t at) const {
    for (const Range& r : readable_) {
      if (at >= r.lo && at < r.hi) return Cursor(at, r.hi);
    }
    Cursor c(at, at);
    c.fail();
    return c;
  }

  bool fde(uint64_t addr);

 private:
  Cie* cie(uint64_t addr);
  bool run(const Cie& cie, Cursor& c, uint64_t end, State& s, const State& initial, uint64_t* loc,
           uint64_t pc_end, bool emit);
  void emit(uint64_t pc, const State& s, bool signal_frame);
  void gap(uint64_t pc);

  uint64_t base_;
  const std::vector<Range>& readable_;
  std::vector<Row>* rows_;
  std::unordered_map<uint64_t, Cie> cies_;  // node-based: pointers stay valid
  uint64_t last_cie_addr_ = 0;              // most FDEs share their CIE with the previous one
  Cie* last_cie_ = nullptr;
};

// A length field: 32-bit, or 64-bit after 0xffffffff. Returns the end of the entry (0 for
// the terminator or a malformed entry).
uint64_t entry_end(Cursor& c) {
  uint64_t len = c.fixed<uint32_t>();
  if (len == 0xffffffffu) len = c.fixed<uint64_t>();
  if (!c.ok() || len == 0) return 0;
  uint64_t end = c.at() + len;
  return end < c.at() ? 0 : end;
}

Cie* Builder::cie(uint64_t addr) {
  if (last_cie_ != nullptr && addr == last_cie_addr_) return last_cie_;
  auto it = cies_.find(addr);
  if (it != cies_.end()) {
    last_cie_addr_ = addr;
    return last_cie_ = &it->second;
  }
  Cursor c = cursor(addr);
  uint64_t end = entry_end(c);
  if (!end) return nullptr;
  if (c.fixed<uint32_t>() != 0) return nullptr;  // not a CIE (id 0 in .eh_frame)
  uint8_t version = c.u8();
  char aug[16];
  size_t n = 0;
  for (char ch = static_cast<char>(c.u8()); ch && c.ok(); ch = static_cast<char>(c.u8())) {
    if (n + 1 >= sizeof(aug)) return nullptr;
    aug[n++] = ch;
  }
  aug[n] = 0;
  Cie cie;
  if (strstr(aug, "eh")) c.skip(8);
  cie.code_align = c.uleb();
  cie.data_align = c.sleb();
  uint64_t ra = version == 1 ? c.u8() : c.uleb();
  if (ra != kRa) return nullptr;
  if (aug[0] == 'z') {
    cie.has_aug_data = true;
    uint64_t len = c.uleb();
    uint64_t data_end = c.at() + len;
    for (const char* p = aug + 1; *p && c.ok(); ++p) {
      if (*p == 'R') {
        cie.fde_enc = c.u8();
      } else if (*p == 'L') {
        c.u8();
      } else if (*p == 'P') {
        uint8_t enc = c.u8();
        c.encoded(enc & 0x7f, 0, false);  // the personality routine: not needed
      } else if (*p == 'S') {
        cie.signal_frame = true;
      } else {
        break;  // a letter d9 does not know: its data is skipped with the rest
      }
    }
    c.seek(data_end);
  }
  if (!c.ok() || c.at() > end) return nullptr;
  cie.insns = c.at();
  cie.insns_end = end;
  last_cie_addr_ = addr;
  return last_cie_ = &cies_.emplace(addr, cie).first->second;
}

// Matches the CFA expression every x86-64 linker writes for .plt (the stub pushes once
// its offset within the 16-byte entry reaches N): rsp + 8 + ((rip & 15) >= N) << 3.
int plt_threshold(Cursor c, uint64_t len) {
  static const uint8_t kHead[] = {0x77, 0x08, 0x80,
                                  0x00, 0x3f, 0x1a};        // breg7 8 breg16 0 lit15 and
  static const uint8_t kTail[] = {0x2a, 0x33, 0x24, 0x22};  // ge lit3 shl plus
  if (len != sizeof(kHead) + 1 + sizeof(kTail)) return 0;
  uint8_t b[sizeof(kHead) + 1 + sizeof(kTail)];
  for (uint8_t& x : b) x = c.u8();
  if (!c.ok() || memcmp(b, kHead, sizeof(kHead)) != 0 ||
      memcmp(b + sizeof(kHead) + 1, kTail, sizeof(kTail)) != 0) {
    return 0;
  }
  uint8_t lit = b[sizeof(kHead)];  // DW_OP_litN
  return lit >= 0x30 && lit <= 0x4f ? lit - 0x30 : 0;
}

void set_offset(State& s, uint64_t reg, int64_t offset) {
  if (reg == kRbp) s.fp = {Rule::kOffset, offset};
  if (reg == kRa) s.ra = {Rule::kOffset, offset};
}

void set_rule(State& s, uint64_t reg, Rule::Type type) {
  if (reg == kRbp) s.fp = {type, 0};
  if (reg == kRa) s.ra = {type, 0};
}

void restore(State& s, const State& initial, uint64_t reg) {
  if (reg == kRbp) s.fp = initial.fp;
  if (reg == kRa) s.ra = initial.ra;
}

bool Builder::run(const Cie& cie, Cursor& c, uint64_t end, State& s, const State& initial,
                  uint64_t* loc, uint64_t pc_end, bool emit_rows) {
  constexpr int kMaxRemembered = 16;
  State remembered[kMaxRemembered];
  int depth = 0;
  auto advance = [&](uint64_t to) {
    if (emit_rows && to > *loc && *loc < pc_end) emit(*loc, s, cie.signal_frame);
    *loc = to;
  };
  while (c.ok() && c.at() < end) {
    uint8_t op = c.u8();
    uint8_t low = op & 0x3f;
    switch (op & 0xc0) {
      case 0x40:
        advance(*loc + low * cie.code_align);
        continue;
      case 0x80:
        set_offset(s, low, static_cast<int64_t>(c.uleb()) * cie.data_align);
        continue;
      case 0xc0:
        restore(s, initial, low);
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00:
        break;  // nop
      case 0x01:
        advance(c.encoded(cie.fde_enc, 0));
        break;
      case 0x02:
        advance(*loc + c.u8() * cie.code_align);
        break;
      case 0x03:
        advance(*loc + c.fixed<uint16_t>() * cie.code_align);
        break;
      case 0x04:
        advance(*loc + c.fixed<uint32_t>() * cie.code_align);
        break;
      case 0x05: {
        uint64_t reg = c.uleb();
        set_offset(s, reg, static_cast<int64_t>(c.uleb()) * cie.data_align);
        break;
      }
      case 0x06:
        restore(s, initial, c.uleb());
        break;
      case 0x07:
        set_rule(s, c.uleb(), Rule::kUndefined);
        break;
      case 0x08:
        set_rule(s, c.uleb(), Rule::kSame);
        break;
      case 0x09: {
        uint64_t reg = c.uleb();
        c.uleb();
        set_rule(s, reg, Rule::kOther);
        break;
      }
      case 0x0a:
        if (depth == kMaxRemembered) return false;
        remembered[depth++] = s;
        break;
      case 0x0b:
        if (depth == 0) return false;
        s = remembered[--depth];
        break;
      case 0x0c:
        s.cfa_reg = c.uleb();
        s.cfa_offset = static_cast<int64_t>(c.uleb());
        s.cfa_expr = false;
        break;
      case 0x0d:
        s.cfa_reg = c.uleb();
        s.cfa_expr = false;
        break;
      case 0x0e:
        s.cfa_offset = static_cast<int64_t>(c.uleb());
        break;
      case 0x0f: {
        uint64_t len = c.uleb();
        s.cfa_expr = true;
        s.plt_threshold = plt_threshold(c, len);
        c.skip(len);
        break;
      }
      case 0x10: {
        uint64_t reg = c.uleb();
        c.skip(c.uleb());
        set_rule(s, reg, Rule::kOther);
        break;
      }
      case 0x11: {
        uint64_t reg = c.uleb();
        set_offset(s, reg, c.sleb() * cie.data_align);
        break;
      }
      case 0x12:
        s.cfa_reg = c.uleb();
        s.cfa_offset = c.sleb() * cie.data_align;
        s.cfa_expr = false;
        break;
      case 0x13:
        s.cfa_offset = c.sleb() * cie.data_align;
        break;
      case 0x14:
      case 0x15: {
        uint64_t reg = c.uleb();
        c.uleb();  // same length for the signed form
        set_rule(s, reg, Rule::kOther);
        break;
      }
      case 0x16: {
        uint64_t reg = c.uleb();
        c.skip(c.uleb());
        set_rule(s, reg, Rule::kOther);
        break;
      }
      case 0x2e:
        c.uleb();
        break;      // GNU_args_size
      case 0x2f: {  // GNU_negative_offset_extended
        uint64_t reg = c.uleb();
        set_offset(s, reg, -static_cast<int64_t>(c.uleb()) * cie.data_align);
        break;
      }
      default:
        return false;  // an opcode whose operands are unknown: stop here
    }
  }
  return c.ok();
}

void Builder::emit(uint64_t pc, const State& s, bool signal_frame) {
  if (pc < base_ || pc - base_ > UINT32_MAX) return;
  Row row{static_cast<uint32_t>(pc - base_), 0, 0, kUnknown};
  if (signal_frame) {
    row.kind = kSignal;
  } else if (s.ra.type == Rule::kUndefined) {
    row.kind = kEnd;
  } else if (s.ra.type != Rule::kOffset || s.ra.offset != -8 || s.fp.type == Rule::kOther ||
             (s.fp.type == Rule::kOffset &&
              (s.fp.offset == 0 || s.fp.offset < INT16_MIN || s.fp.offset > INT16_MAX))) {
    row.kind = kUnknown;
  } else if (s.cfa_expr) {
    if (s.plt_threshold) {
      row.kind = kPlt;
      row.cfa_offset = s.plt_threshold;
    }
  } else if ((s.cfa_reg == kRsp || s.cfa_reg == kRbp) && s.cfa_offset >= 0 &&
             s.cfa_offset <= INT32_MAX) {
    row.kind = s.cfa_reg == kRsp ? kCfaRsp : kCfaRbp;
    row.cfa_offset = static_cast<int32_t>(s.cfa_offset);
    if (s.fp.type == Rule::kOffset) row.fp_offset = static_cast<int16_t>(s.fp.offset);
  }
  // Consecutive pcs with the same rule need one row.
  if (!rows_->empty()) {
    const Row& last = rows_->back();
    if (last.pc < row.pc && last.kind == row.kind && last.cfa_offset == row.cfa_offset &&
        last.fp_offset == row.fp_offset && !last.unused) {
      return;
    }
  }
  rows_->push_back(row);
}

void Builder::gap(uint64_t pc) {
  if (pc < base_ || pc - base_ > UINT32_MAX) return;
  rows_->push_back({static_cast<uint32_t>(pc - base_), 0, 0, kUnknown, 1});
}

bool Builder::fde(uint64_t addr) {
  Cursor c = cursor(addr);
  uint64_t end = entry_end(c);
  if (!end) return false;
  uint64_t id_at = c.at();
  uint32_t id = c.fixed<uint32_t>();
  if (!c.ok() || id == 0 || id > id_at) return false;
  Cie* info = cie(id_at - id);
  if (!info) return false;
  uint64_t pc_begin = c.encoded(info->fde_enc, 0);
  uint64_t pc_range = c.encoded(info->fde_enc & 0x0f, 0, false);
  if (info->has_aug_data) c.skip(c.uleb());
  if (!c.ok() || c.at() > end || pc_range == 0) return false;
  uint64_t pc_end = pc_begin + pc_range;

  if (!info->initial_known) {
    State first;
    uint64_t at = pc_begin;
    Cursor ci = cursor(info->insns);
    // Initial instructions that advance the location would have to run for each FDE.
    info->initial_ok =
        run(*info, ci, info->insns_end, first, first, &at, pc_end, false) && at == pc_begin;
    info->initial = first;
    info->initial_known = true;
  }
  State s;
  uint64_t loc = pc_begin;
  if (info->initial_ok) {
    s = info->initial;
  } else {
    Cursor ci = cursor(info->insns);
    if (!run(*info, ci, info->insns_end, s, s, &loc, pc_end, false)) return false;
  }
  const State initial = s;
  loc = pc_begin;
  bool ok = run(*info, c, end, s, initial, &loc, pc_end, true);
  if (ok && loc < pc_end) emit(loc, s, info->signal_frame);
  gap(pc_end);
  return ok;
}

}  // namespace

bool build_rows(uint64_t hdr, uint64_t base, const std::vector<Range>& readable,
                std::vector<Row>* rows) {
  Builder b(base, readable, rows);
  Cursor c = b.cursor(hdr);
  uint8_t version = c.u8();
  uint8_t frame_enc = c.u8();
  uint8_t count_enc = c.u8();
  uint8_t table_enc = c.u8();
  c.encoded(frame_enc, hdr);
  uint64_t count = c.encoded(count_enc, hdr);
  // Every linker writes a sorted table of (initial_loc, fde) as 4-byte offsets from hdr.
  if (!c.ok() || version != 1 || table_enc != 0x3b) return false;
  bool ok = true;
  size_t first = rows->size();
  for (uint64_t i = 0; i < count && c.ok(); ++i) {
    c.fixed<int32_t>();
    uint64_t fde = hdr + static_cast<uint64_t>(int64_t{c.fixed<int32_t>()});
    if (c.ok() && !b.fde(fde)) ok = false;  // keep the FDEs that parse
  }
  // Sort by pc; where a function starts exactly at the previous one's end, its first row
  // replaces the gap row. The table lists FDEs by pc, so the rows usually are in order
  // already: checking is linear, sorting is not.
  auto by_pc = [](const Row& a, const Row& b) {
    return a.pc != b.pc ? a.pc < b.pc : a.unused > b.unused;
  };
  auto begin = rows->begin() + static_cast<ptrdiff_t>(first);
  if (!std::is_sorted(begin, rows->end(), by_pc)) std::stable_sort(begin, rows->end(), by_pc);
  size_t out = first;
  for (size_t i = first; i < rows->size(); ++i) {
    Row r = (*rows)[i];
    r.unused = 0;
    if (out > first && (*rows)[out - 1].pc == r.pc) --out;  // the later row wins
    if (out > first) {
      const Row& last = (*rows)[out - 1];
      if (last.kind == r.kind && last.cfa_offset == r.cfa_offset && last.fp_offset == r.fp_offset) {
        continue;
      }
    }
    (*rows)[out++] = r;
  }
  rows->resize(out);
  return ok && c.ok();
}

Table index_rows(const std::vector<Row>& rows, std::vector<uint32_t>* pages) {
  Table t;
  pages->clear();
  if (rows.empty()) return t;
  uint32_t first = rows.front().pc >> kPageShift, last = rows.back().pc >> kPageShift;
  pages->resize(last - first + 1);
  uint32_t r = 0;
  for (uint32_t p = first; p <= last; ++p) {
    uint64_t start = uint64_t{p} << kPageShift;
    while (r + 1 < rows.size() && rows[r + 1].pc <= start) ++r;
    (*pages)[p - first] = r;
  }
  t.rows = rows.data();
  t.count = static_cast<uint32_t>(rows.size());
  t.pages = pages->data();
  t.page_count = static_cast<uint32_t>(pages->size());
  t.first_page = first;
  return t;
}

}  // namespace d9::cfi
