// The process-wide state the lifecycle (runtime.cc) and the writer thread
// (writer_thread.cc) share: the state machine, the options, the boot id. Internal to libd9.so.
#pragma once

#include <atomic>
#include <string>

#include "preload/options.h"

namespace d9::runtime {

enum State : int { kUninit = 0, kStarting = 1, kOn = 2, kOff = 3 };

extern std::atomic<int> g_state;  // a State
extern Options g_options;
extern char g_boot_id[32];  // {4 lowercase letters}-{pid}, this process's directory

// Turns profiling off for good, saying why on stderr once.
void turn_off(const std::string& why);

// S3 shipping (ship/worker.h) is on.
inline bool shipping() {
  return g_options.s3_bucket[0] != 0;
}

}  // namespace d9::runtime
