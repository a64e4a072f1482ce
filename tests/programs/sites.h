// Allocation sites the end-to-end tests can recognise without a symbolizer: each site's
// code goes in a section of its own, and the program prints the section's address range
// with what it really allocated there ("site NAME START END BYTES COUNT", read by
// parse_sites() in tests/test_util.h).
#pragma once

#include <stdio.h>

#include <cstdint>

#define SITE(name) extern "C" __attribute__((noinline, used, section("d9site_" #name)))
#define SITE_BOUNDS(name)                        \
  extern "C" const char __start_d9site_##name[]; \
  extern "C" const char __stop_d9site_##name[];
#define REPORT_SITE(name, bytes, count) \
  report_site(#name, __start_d9site_##name, __stop_d9site_##name, bytes, count)

// Keeps the compiler from pairing and deleting malloc/free.
static inline void use(void* p) {
  asm volatile("" : : "r"(p) : "memory");
}

static inline void report_site(const char* name, const char* start, const char* stop,
                               uint64_t bytes, uint64_t count) {
  printf("site %s %lu %lu %lu %lu\n", name, reinterpret_cast<unsigned long>(start),
         reinterpret_cast<unsigned long>(stop), static_cast<unsigned long>(bytes),
         static_cast<unsigned long>(count));
}
