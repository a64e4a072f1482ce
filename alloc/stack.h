// Stack capture for allocation samples, through libunwind (libgcc's unwinder until it is
// loaded).
//
// libunwind is loaded with dlopen(RTLD_LOCAL) rather than linked: libunwind.so.8 exports
// unversioned _Unwind_* symbols, and as a dependency of a preloaded library it would
// sit in the global lookup scope where a C++ library the host dlopens later could bind
// its exception unwinding to it instead of libgcc_s. Kept local, the host never sees it.
#pragma once

#include <cstdint>

namespace d9::stack {

inline constexpr int kMaxDepth = 256;

// Loads libunwind (a loader call). d9's writer thread does it when the first sample asks,
// so a process that never samples never pays for it (0.2-0.3 ms at every start). Until
// then (samples taken in the constructors of libraries the loader initialises before
// d9's own, and while the writer loads it), or for good if libunwind.so.8 is missing,
// capture() walks with libgcc's unwinder instead: about 20 times slower, but lock-free
// and loaded with d9. No host thread ever waits for the load.
bool load_unwinder();
// For the writer: true once a capture has asked for libunwind.
bool unwinder_wanted();

// Captures up to `max_depth` return addresses of the calling thread, leaf first, with
// d9's own frames removed, so out[0] is the code that called malloc/new.
int capture(uint64_t* out, int max_depth);

// A fork child may inherit the loader's lock (dl_iterate_phdr) held by a thread that does
// not exist there, and libunwind takes it on a cache miss: until the writer has taken it
// once (cpu::poll, first thing in the child's writer), capture() walks with the CPU
// sampler's tables instead (unwind.h), which never touch the loader, or without tables
// (the parent was never CPU-sampled, so never built them) with libgcc's walk, which finds
// unwind tables through _dl_find_object, lock-free.
void set_loader_suspect(bool suspect);

}  // namespace d9::stack
