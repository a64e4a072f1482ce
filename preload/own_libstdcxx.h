// libd9.so depends on libstdc++, so the loader brings libstdc++ into every profiled process,
// C programs included, and runs its constructor before d9's own. That constructor
// allocates libstdc++'s emergency exception pool (72 KiB in GCC 12). In a program that
// uses libstdc++ itself the block is the program's; in one that does not, it exists only
// because of d9, like d9's own rings, and is not the program's allocation to report.
// Sampled, it would show as a phantom libstdc++ site in one C process in eight or so, and
// make that process pay for a seal at exit.
#pragma once

namespace d9::runtime {

// For an allocation about to be sampled before d9's constructor has run: true if it comes
// from libstdc++ and no loaded object other than libd9.so needs libstdc++. Walks this
// thread's stack (libgcc's unwinder at that point) and, once, the loaded objects' dynamic
// sections.
bool from_libstdcxx_loaded_only_for_d9();

}  // namespace d9::runtime
