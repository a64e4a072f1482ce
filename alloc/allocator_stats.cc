#include "alloc/allocator_stats.h"

#include <cstddef>

#include "alloc/jemalloc_api.h"

namespace d9::alloc {

bool read_allocator_stats(AllocatorStats* out) {
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (d9_je_mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0) return false;
  struct Field {
    const char* name;
    uint64_t* value;
  };
  const Field fields[] = {{"stats.allocated", &out->allocated},
                          {"stats.active", &out->active},
                          {"stats.resident", &out->resident},
                          {"stats.mapped", &out->mapped},
                          {"stats.retained", &out->retained}};
  for (const Field& f : fields) {
    size_t v = 0;
    len = sizeof(v);
    if (d9_je_mallctl(f.name, &v, &len, nullptr, 0) != 0) return false;
    *f.value = v;
  }
  // 4096: MALLCTL_ARENAS_ALL, the sum over every arena.
  size_t page = 0, dirty = 0, muzzy = 0;
  len = sizeof(page);
  d9_je_mallctl("arenas.page", &page, &len, nullptr, 0);
  d9_je_mallctl("stats.arenas.4096.pdirty", &dirty, &len, nullptr, 0);
  d9_je_mallctl("stats.arenas.4096.pmuzzy", &muzzy, &len, nullptr, 0);
  out->purgeable = (dirty + muzzy) * page;
  return true;
}

}  // namespace d9::alloc
