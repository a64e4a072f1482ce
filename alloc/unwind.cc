#include "alloc/unwind.h"

#include <link.h>
#include <ucontext.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace d9::unwind {

struct Snapshot {
  std::vector<Module> modules;  // sorted by start, disjoint
  std::vector<std::shared_ptr<const ModuleMap::Table>> owners;
  size_t rows = 0;
};

namespace {

std::atomic<const Snapshot*> g_current{nullptr};
// Handlers inside walk(). A replaced snapshot is freed once this has been seen at zero
// after the swap: every handler that could have loaded it has left by then.
std::atomic<int64_t> g_readers{0};

const Module* find_module(const Snapshot* s, uint64_t pc) {
  if (!s) return nullptr;
  const Module* m = s->modules.data();
  size_t lo = 0, hi = s->modules.size();
  while (lo < hi) {  // first module with start > pc
    size_t mid = lo + (hi - lo) / 2;
    if (m[mid].start <= pc) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0 || pc >= m[lo - 1].end) return nullptr;
  return &m[lo - 1];
}

// Offset of a saved register in the ucontext a sigreturn frame holds at rsp.
constexpr uint64_t greg(int reg) {
  return offsetof(ucontext_t, uc_mcontext) + offsetof(mcontext_t, gregs) +
         static_cast<uint64_t>(reg) * sizeof(greg_t);
}

}  // namespace

WalkResult walk(const Regs& regs, const StackBounds& stack, uint64_t* out, int max_depth) {
  WalkResult result{0, false};
  if (max_depth <= 0) return result;
  out[result.depth++] = regs.pc;
  // Only a stack d9 knows is read: from the interrupted sp up to the top of the stack,
  // all of which is mapped.
  const uint64_t lo = regs.sp, hi = stack.hi;
  if (lo < stack.lo || lo >= hi) return result;
  auto read = [&](uint64_t addr, uint64_t* v) {
    if (addr < lo || addr > hi - 8 || (addr & 7)) return false;
    *v = *reinterpret_cast<const uint64_t*>(addr);
    return true;
  };

  g_readers.fetch_add(1, std::memory_order_seq_cst);
  const Snapshot* snap = g_current.load(std::memory_order_seq_cst);
  uint64_t pc = regs.pc, sp = regs.sp, fp = regs.fp;
  bool exact = true;  // pc is where execution is, not a return address
  const Module* m = nullptr;
  for (;;) {
    uint64_t at = exact ? pc : pc - 1;  // a return address may follow the function's last call
    // Consecutive frames are mostly in the same module.
    if (!m || at < m->start || at >= m->end) m = find_module(snap, at);
    const cfi::Row* row = m ? cfi::find_row(m->table, at - m->base) : nullptr;
    uint8_t kind = row ? row->kind : uint8_t{cfi::kUnknown};
    uint64_t cfa = 0, ra = 0, next_fp = fp;
    bool ok = true;
    switch (kind) {
      case cfi::kEnd:
        result.complete = true;
        ok = false;
        break;
      case cfi::kSignal: {
        uint64_t rip, rsp, rbp;
        ok = read(sp + greg(REG_RIP), &rip) && read(sp + greg(REG_RSP), &rsp) &&
             read(sp + greg(REG_RBP), &rbp) && rsp > sp;
        cfa = rsp;
        ra = rip;
        next_fp = rbp;
        break;
      }
      case cfi::kUnknown:  // the frame pointer chain: [rbp] = caller's rbp, [rbp+8] = ra
        cfa = fp + 16;
        ok = fp >= sp && read(fp + 8, &ra) && read(fp, &next_fp);
        break;
      default:
        if (kind == cfi::kCfaRsp) {
          cfa = sp + static_cast<uint64_t>(row->cfa_offset);
        } else if (kind == cfi::kCfaRbp) {
          cfa = fp + static_cast<uint64_t>(row->cfa_offset);
        } else {  // kPlt
          cfa = sp + 8 + ((pc & 15) >= static_cast<uint64_t>(row->cfa_offset) ? 8 : 0);
        }
        ok = read(cfa - 8, &ra) &&
             (row->fp_offset == 0 || read(cfa + static_cast<uint64_t>(row->fp_offset), &next_fp));
        break;
    }
    // Each step must move up the stack; anything else is a broken chain.
    if (!ok || cfa <= sp || ra < 4096 || result.depth == max_depth) break;
    exact = kind == cfi::kSignal;
    pc = ra;
    sp = cfa;
    fp = next_fp;
    out[result.depth++] = pc;
  }
  g_readers.fetch_sub(1, std::memory_order_release);
  return result;
}

void reset_after_fork() {
  g_readers.store(0, std::memory_order_relaxed);
}

bool has_tables() {
  return g_current.load(std::memory_order_acquire) != nullptr;
}

// ---- writer side ---------------------------------------------------------------------

struct ModuleMap::Scan {
  ModuleMap* map;
  Snapshot* snap;
  const std::atomic<bool>* stop = nullptr;
  bool stopped = false;
  unsigned long long adds = 0, subs = 0;

  // The loader's load/unload counters (older glibc may not pass them).
  void note_counters(const dl_phdr_info* info, size_t size) {
    if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
      adds = info->dlpi_adds;
      subs = info->dlpi_subs;
    }
  }
};

ModuleMap::ModuleMap() {
  if (const Snapshot* s = g_current.load(std::memory_order_acquire)) {
    for (const Module& m : s->modules) {
      auto t = std::make_shared<Table>();
      t->view = m.table;
      tables_[Key{m.base, 0, m.end}] = t;  // keyed by range only: see refresh()
    }
  }
}

ModuleMap::~ModuleMap() = default;

bool ModuleMap::refresh(const std::atomic<bool>* stop) {
  Scan scan{this, nullptr, stop};
  if (built_) {
    // Cheap poll: the loader's counters come with the first object.
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t size, void* data) {
          auto* s = static_cast<Scan*>(data);
          s->note_counters(info, size);
          return 1;
        },
        &scan);
    if (scan.adds == adds_ && scan.subs == subs_) {
      if (!retired_.empty() && g_readers.load(std::memory_order_seq_cst) == 0) retired_.clear();
      return false;
    }
  }

  auto snap = std::make_unique<Snapshot>();
  scan.snap = snap.get();
  // Tables are built inside the callback: while it runs the loader cannot unmap the
  // module being read (dlclose removes it from the list under the same lock first).
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        auto* s = static_cast<Scan*>(data);
        s->note_counters(info, size);
        uint64_t start = UINT64_MAX, end = 0, hdr = 0;
        std::vector<cfi::Range> readable;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          uint64_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (ph.p_type == PT_LOAD) {
            if (ph.p_flags & PF_R) readable.push_back({lo, hi});
            if (ph.p_flags & PF_X) {
              start = std::min(start, lo);
              end = std::max(end, hi);
            }
          } else if (ph.p_type == PT_GNU_EH_FRAME) {
            hdr = lo;
          }
        }
        if (!hdr || start >= end) return 0;  // no unwind info: frame pointers only
        ModuleMap& map = *s->map;
        // Keyed by where the module and its table sit; a fork child's adopted tables are
        // keyed without the table address (hdr 0) and matched by range.
        Key key{info->dlpi_addr, hdr, end};
        auto it = map.tables_.find(key);
        if (it == map.tables_.end()) {
          auto adopted = map.tables_.find(Key{info->dlpi_addr, 0, end});
          if (adopted != map.tables_.end()) {
            it = map.tables_.emplace(key, adopted->second).first;
            map.tables_.erase(adopted);
          }
        }
        if (it == map.tables_.end()) {
          if (s->stop && s->stop->load(std::memory_order_relaxed)) {
            s->stopped = true;
            return 1;
          }
          auto t = std::make_shared<Table>();
          cfi::build_rows(hdr, info->dlpi_addr, readable, &t->rows);  // partial is fine
          t->rows.shrink_to_fit();
          t->view = cfi::index_rows(t->rows, &t->pages);
          it = map.tables_.emplace(key, std::move(t)).first;
        }
        s->snap->modules.push_back({start, end, info->dlpi_addr, it->second->view});
        s->snap->owners.push_back(it->second);
        s->snap->rows += it->second->view.count;
        return 0;
      },
      &scan);
  if (scan.stopped) return false;
  adds_ = scan.adds;
  subs_ = scan.subs;
  built_ = true;

  std::sort(snap->modules.begin(), snap->modules.end(),
            [](const Module& a, const Module& b) { return a.start < b.start; });
  // Tables no snapshot names any more (unloaded modules) are dropped; retired snapshots
  // keep theirs alive until they go.
  for (auto it = tables_.begin(); it != tables_.end();) {
    bool used = false;
    for (const auto& owner : snap->owners) used |= owner == it->second;
    it = used ? std::next(it) : tables_.erase(it);
  }
  const Snapshot* old = g_current.exchange(snap.get(), std::memory_order_seq_cst);
  if (current_ && old == current_.get()) retired_.push_back(std::move(current_));
  current_ = std::move(snap);
  if (!retired_.empty() && g_readers.load(std::memory_order_seq_cst) == 0) retired_.clear();
  return true;
}

size_t ModuleMap::modules() const {
  return current_ ? current_->modules.size() : 0;
}
size_t ModuleMap::rows() const {
  return current_ ? current_->rows : 0;
}

}  // namespace d9::unwind
