// CPU sampling at the interposition points: per-thread CPU-time timers, the SIGPROF
// handler, the thread hooks and the host's own use of SIGPROF.
//
// Each thread gets a POSIX timer on its own CPU-time clock (CLOCK_THREAD_CPUTIME_ID, or
// the thread's clock id for threads that were running before d9 started) that sends
// SIGPROF to that thread (SIGEV_THREAD_ID) every 1/hz seconds of CPU it uses. Threads are
// hooked in pthread_create, which arms the new thread's timer before it runs any host code;
// the timer is deleted before the thread exits (return, pthread_exit or cancellation),
// since every timer holds a queued-signal slot of the user's RLIMIT_SIGPENDING. d9's own
// threads never get one.
//
// CPU-time timers are checked on the kernel tick, so a rate above the tick rate cannot be
// honoured: the rate used (and written as cpu.profile.frequency_hz) is min(D9_CPU_HZ,
// tick rate), said once on stderr.
//
// The host's signals stay its own. d9's signals are told apart by si_code == SI_TIMER
// and a per-process cookie in si_value; any other SIGPROF goes to the disposition the host
// set (its handler, its SIG_IGN, or the default action). The host sees and changes only
// its own view of SIGPROF through sigaction() and signal(): many programs catch every
// fatal signal (bash does), and that alone does not stop d9. Once the host profiles with
// SIGPROF itself (ITIMER_PROF, a SIGPROF timer of its own, as gperftools' profiler does)
// or replaces d9's handler behind its back, the host wins: d9 deletes every timer, hands
// the signal over and says so once. The writer thread checks for that on every drain.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdint>

namespace d9::cpu {

// Start-up, on the thread running the library constructor: installs the handler, arms
// the calling thread and every thread already running. `hz` is D9_CPU_HZ (0 = off).
void start(uint64_t hz, uint32_t ring_slots, int stack_depth);

// The rate samples are taken at (0 when CPU sampling never started).
uint64_t frequency_hz();
// "on", "off" (D9_CPU_HZ=0 or no resources) or "host" (the host took SIGPROF over).
const char* state();

// The interposed thread functions.
int create_thread(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg);
// A thread is about to exit (pthread_exit, or its start routine returned): its timer goes.
void thread_exiting();
// pthread_create without d9's hook, for d9's own threads.
int create_internal_thread(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                           void* arg);

// The interposed sigaction() and signal(); other signals pass straight through.
int host_sigaction(int sig, const struct sigaction* act, struct sigaction* old);
sighandler_t host_signal(int sig, sighandler_t handler);

// Writer thread, every drain: works out the main thread's stack bounds if it asked
// (alloc/cpu_profiler.h), refreshes the unwind tables after dlopen/dlclose (a fork
// waits for a refresh in progress: the child must not inherit the loader's lock from the
// writer; see stack::set_loader_suspect for the lock held by the host's threads), checks
// that the SIGPROF disposition is still d9's, deletes timers of foreign threads that
// have exited. Building tables stops early once `*stop` is set (exit).
void poll(const std::atomic<bool>* stop);

// Fork child (forking thread only): the parent's timers are not inherited; re-arm this
// thread's and start the CPU ring afresh.
void after_fork_child();

// Exit: whether the writer of a fork child is blocked on a loader lock inherited held (it
// never returns; not worth waiting for).
bool writer_stuck_in_loader();

}  // namespace d9::cpu
