#include "alloc/size_classes.h"

#include <sched.h>

#include <cstddef>
#include <cstdint>

#include "alloc/jemalloc_api.h"

// jemalloc 5.3's size-class tables (sz.h): the lookup from a small request to its class
// index, indexed by (size + 7) >> 3, and the size of each class.
extern "C" {
__attribute__((visibility("hidden"))) extern uint8_t je_sz_size2index_tab[];
__attribute__((visibility("hidden"))) extern size_t je_sz_index2size_tab[];
}

namespace d9::alloc {

std::atomic<bool> g_min_size_class_set{false};

namespace {
std::atomic<bool> g_claimed{false};
}  // namespace

bool set_min_size_class() {
  if (g_claimed.exchange(true, std::memory_order_acq_rel)) {
    while (!min_size_class_set()) sched_yield();  // another thread is at it, and reports
    return true;
  }
  d9_je_nallocx(1, 0);  // initialises jemalloc, which fills its tables
  // Expected: class 0 is 8 bytes, class 1 is 16; sizes 0..8 (entries 0, 1) map to class 0.
  uint8_t* lookup = je_sz_size2index_tab;
  bool ok = false;
  if (je_sz_index2size_tab[0] == 8 && je_sz_index2size_tab[1] == 16 && lookup[0] == 0 &&
      lookup[1] == 0 && lookup[2] == 1) {
    lookup[0] = 1;
    lookup[1] = 1;
    ok = d9_je_nallocx(1, 0) == 16;
  }
  g_min_size_class_set.store(true, std::memory_order_release);
  return ok;
}

}  // namespace d9::alloc
