// The seal tools shared with fork children (adopted warm, warmed up for them), the loader
// lock d9's threads load libraries under, and the writer's lazy loads. Internal to libd9.so.
#pragma once

#include <pthread.h>

#include "preload/writer_thread.h"
#include "writer/seal_tools.h"

namespace d9::runtime {

// Held by whoever uses the seal tools; fork takes it (2 ms at most) to hand them over.
extern pthread_mutex_t g_tools_mu;
// Held while d9's threads load a library; fork takes it. Taken after g_tools_mu.
extern pthread_mutex_t g_loader_mu;
extern SealTools* g_tools_for_child;  // what the next fork child's writer starts with

// pthread_atfork handlers.
void tools_fork_prepare();
void tools_fork_parent();
void tools_fork_child();

// The writer loads libunwind once a sample has asked for it (stack.h).
void load_unwinder_if_wanted(Writer& w);

// The writer's seal tools, loaded at the first call. Called with g_tools_mu held.
SealTools* seal_tools(Writer& w);

// A process that forks: starts the warm-up thread, once (see warm_up_main).
void warm_up_for_children(Writer& w);

}  // namespace d9::runtime
