#include "preload/own_libstdcxx.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "alloc/stack.h"

// The first byte of libd9's own image (linker-provided).
extern "C" const char __ehdr_start __attribute__((visibility("hidden")));

namespace d9::runtime {
namespace {

constexpr char kLibstdcxx[] = "libstdc++.so";

bool names_libstdcxx(const char* soname) {
  return strncmp(soname, kLibstdcxx, sizeof kLibstdcxx - 1) == 0;
}

// dl_iterate_phdr callback: sets *data to 1 and stops at an object other than libd9.so
// whose DT_NEEDED names libstdc++.
int needs_libstdcxx(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_addr == reinterpret_cast<uintptr_t>(&__ehdr_start)) return 0;  // libd9.so
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_DYNAMIC) continue;
    const auto* dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);
    uintptr_t strtab = 0;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
    }
    if (strtab == 0) return 0;
    // The loader relocates the dynamic section in place, except where it is read-only
    // (the vDSO's): there it still holds the unrelocated address.
    if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
    for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_NEEDED &&
          names_libstdcxx(reinterpret_cast<const char*>(strtab + d->d_un.d_val))) {
        *static_cast<int*>(data) = 1;
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

bool from_libstdcxx_loaded_only_for_d9() {
  uint64_t caller = 0;
  if (stack::capture(&caller, 1) != 1) return false;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(caller - 1), &info) == 0 || info.dli_fname == nullptr) {
    return false;
  }
  const char* slash = strrchr(info.dli_fname, '/');
  if (!names_libstdcxx(slash != nullptr ? slash + 1 : info.dli_fname)) return false;
  // Worked out once (a constructor that starts threads may race here: same answer).
  static std::atomic<int> needed_by_program{-1};
  if (needed_by_program.load(std::memory_order_relaxed) < 0) {
    int found = 0;
    dl_iterate_phdr(needs_libstdcxx, &found);
    needed_by_program.store(found, std::memory_order_relaxed);
  }
  return needed_by_program.load(std::memory_order_relaxed) == 0;
}

}  // namespace d9::runtime
