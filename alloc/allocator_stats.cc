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
  return true;
}

}  // namespace d9::alloc
