#include "alloc/collector.h"

#include <algorithm>
#include <cstring>

#include "alloc/records.h"

namespace d9::alloc {
namespace {

uint64_t dropped_frees(const Rings& rings, const Counters& c) {
  // The overflow ring counts frees neither ring could take; untracked samples are frees
  // that can never be reported.
  return rings.frees_overflow.dropped() + c.untracked;
}

// A free waits this many drains (~1 s at the 5 ms interval) for its allocation.
constexpr uint32_t kMaxDrainsPending = 200;

}  // namespace

bool Collector::pending(const Rings& rings, const Counters& c) const {
  return !pending_frees_.empty() || rings.allocs.peek() || rings.frees.peek() ||
         rings.frees_overflow.peek() || rings.allocs.dropped() != reported_dropped_allocs_ ||
         dropped_frees(rings, c) != reported_dropped_frees_;
}

void Collector::copy(const void* rec, size_t size, Item* item) {
  item->in_ring = nullptr;
  item->offset = static_cast<uint32_t>(batch_.size());
  batch_.insert(batch_.end(), static_cast<const uint8_t*>(rec),
                static_cast<const uint8_t*>(rec) + size);
}

void Collector::copy_frees(Ring& ring) {
  while (const void* rec = ring.peek()) {
    order_.push_back({static_cast<const FreeRecord*>(rec)->timestamp_ns, nullptr, 0, true, 0});
    copy(rec, sizeof(FreeRecord), &order_.back());
    ring.pop();
  }
}

void Collector::list_allocs(Ring& ring) {
  const size_t first = order_.size();
  bool in_order = true;
  for (uint64_t k = 0;; ++k) {
    const void* rec = ring.peek_at(k);
    if (rec == nullptr) break;
    uint64_t ts = static_cast<const AllocRecord*>(rec)->timestamp_ns;
    in_order = in_order && (order_.size() == first || order_.back().ts <= ts);
    order_.push_back({ts, rec, 0, false, 0});
  }
  if (in_order) return;
  for (size_t i = first; i < order_.size(); ++i) {
    const auto* r = static_cast<const AllocRecord*>(order_[i].in_ring);
    copy(r, std::min(ring.record_size(), sizeof(AllocRecord) + r->depth * sizeof(uint64_t)),
         &order_[i]);
    ring.pop();
  }
}

uint64_t Collector::drain(Rings& rings, const Counters& c, Segment& segment) {
  batch_.clear();
  order_.clear();
  // order_ takes one run per source; runs[i] is where run i starts.
  size_t runs[5];
  int run_count = 0;
  // Frees first: a free seen now belongs to an allocation published before it happened,
  // so draining allocations afterwards guarantees its AllocEvent is in this batch.
  runs[run_count++] = order_.size();
  copy_frees(rings.frees);
  runs[run_count++] = order_.size();
  copy_frees(rings.frees_overflow);
  runs[run_count++] = order_.size();
  list_allocs(rings.allocs);
  runs[run_count++] = order_.size();
  for (const PendingFree& p : pending_frees_) {
    order_.push_back({p.record.timestamp_ns, nullptr, 0, true, p.drains_waited + 1});
    copy(&p.record, sizeof(FreeRecord), &order_.back());
  }
  pending_frees_.clear();
  runs[run_count++] = order_.size();
  // Timestamp order across threads and rings; at equal times a free goes first (the
  // address can only be reused after it was freed). Each run is in claim order, which is
  // time order but for threads that claimed close together: sorting it is mostly a check,
  // and merging the runs is linear.
  auto by_time = [](const Item& a, const Item& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.is_free > b.is_free;
  };
  for (int i = 0; i + 1 < run_count; ++i) {
    auto first = order_.begin() + static_cast<ptrdiff_t>(runs[i]);
    auto last = order_.begin() + static_cast<ptrdiff_t>(runs[i + 1]);
    if (!std::is_sorted(first, last, by_time)) std::sort(first, last, by_time);
    if (i > 0) std::inplace_merge(order_.begin(), first, last, by_time);
  }

  Encoder& enc = segment.events();
  const bool liveset = settings().liveset;
  uint64_t written = 0;
  for (const Item& item : order_) {
    const auto* rec =
        item.in_ring ? static_cast<const uint8_t*>(item.in_ring) : &batch_[item.offset];
    if (item.is_free) {
      FreeRecord f;
      memcpy(&f, rec, sizeof(f));
      LiveMap::Live live;
      if (!live_.take_before(f.addr, f.timestamp_ns, &live)) {
        if (item.drains_waited < kMaxDrainsPending) {
          pending_frees_.push_back({f, item.drains_waited});
        } else {
          ++unmatched_frees_;
        }
        continue;
      }
      // dial9 pairs a free with its alloc on addr + alloc_timestamp_ns, bit for bit.
      enc.free_event(f.timestamp_ns, f.tid, f.addr, live.size, live.alloc_ts);
    } else {
      const auto* a = reinterpret_cast<const AllocRecord*>(rec);
      // Interned once, here: the encoder pools the stack by this id.
      const uint32_t stack = stacks_.intern({a->frames(), a->depth}).id;
      enc.alloc_event(a->timestamp_ns, a->tid, a->size, a->addr, {stacks_, stack});
      if (liveset && maybe_sampled(reinterpret_cast<const void*>(a->addr))) {
        live_.insert(a->addr, {a->timestamp_ns, a->size, a->tid, stack});
      }
      // The merges keep each run's order: in-ring records come up in ring order.
      if (item.in_ring) rings.allocs.pop();
    }
    ++written;
  }

  uint64_t drops_a = rings.allocs.dropped();
  uint64_t drops_f = dropped_frees(rings, c);
  if (drops_a != reported_dropped_allocs_ || drops_f != reported_dropped_frees_) {
    enc.overflow_event(monotonic_ns(), drops_a - reported_dropped_allocs_,
                       drops_f - reported_dropped_frees_);
    reported_dropped_allocs_ = drops_a;
    reported_dropped_frees_ = drops_f;
    ++written;
  }
  segment.note_events(written);
  return written;
}

uint64_t Collector::write_live_set(Encoder& enc) const {
  // Oldest first, so a reader sees allocations in the order they were made.
  std::vector<std::pair<uint64_t, const LiveMap::Live*>> by_time;
  by_time.reserve(live_.size());
  live_.for_each([&](uint64_t addr, const LiveMap::Live& l) { by_time.emplace_back(addr, &l); });
  std::sort(by_time.begin(), by_time.end(),
            [](const auto& a, const auto& b) { return a.second->alloc_ts < b.second->alloc_ts; });
  for (const auto& [addr, l] : by_time) {
    enc.live_allocation(l->tid, l->size, addr, l->alloc_ts, {stacks_, l->stack});
  }
  return by_time.size();
}

void Collector::reset() {
  live_.clear();
  pending_frees_.clear();
  stacks_.clear();
  reported_dropped_allocs_ = 0;
  reported_dropped_frees_ = 0;
  unmatched_frees_ = 0;
}

}  // namespace d9::alloc
