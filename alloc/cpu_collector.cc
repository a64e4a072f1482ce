#include "alloc/cpu_collector.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace d9::cpu {
namespace {

// A thread's name is read again at most this often, so renames show up within it.
constexpr uint64_t kNameRefreshNs = 1000000000ULL;
// A signal that stands for several timer expirations is written once per expiration, up
// to this many, so samples x interval stays the thread's CPU time. Expirations merge when
// no tick lands on the thread for a while: on a busy machine, or when the hypervisor
// stalls the vCPU (then the thread's clock jumps by the stolen time). The bound keeps a
// thread that held SIGPROF blocked from flooding one stack.
constexpr uint32_t kMaxRepeats = 256;

// Thread name from /proc/self/task/<tid>/comm; false once the thread is gone.
bool read_comm(uint32_t tid, std::string* out) {
  char path[64] = "/proc/self/task/";
  size_t n = strlen(path);
  char digits[16];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + tid % 10);
    tid /= 10;
  } while (tid);
  while (d) path[n++] = digits[--d];
  memcpy(path + n, "/comm", 6);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64];
  ssize_t got = read(fd, buf, sizeof(buf));
  close(fd);
  if (got <= 0) return false;
  size_t len = static_cast<size_t>(got);
  while (len && (buf[len - 1] == '\n' || buf[len - 1] == 0)) --len;
  out->assign(buf, len);
  return true;
}

}  // namespace

bool Collector::pending(Ring& ring) {
  while (const void* p = ring.peek()) {
    const auto* rec = static_cast<const CpuRecord*>(p);
    if (rec->kind != CpuRecord::kThreadExit) return true;
    names_.erase(rec->tid);  // its samples, all claimed before, are encoded already
    ring.pop();
  }
  return ring.dropped() != reported_drops_;
}

void Collector::note_exit(const CpuRecord& rec) {
  Name& n = names_[rec.tid];
  n.name.assign(rec.name(), strnlen(rec.name(), CpuRecord::kNameBytes));
  n.exited = true;
}

const std::string* Collector::name_of(uint32_t tid, uint64_t now) {
  Name& n = names_[tid];
  if (!n.exited && (n.read_ns == 0 || now - n.read_ns >= kNameRefreshNs)) {
    n.read_ns = now;
    read_comm(tid, &n.name);  // a thread gone meanwhile keeps the name last seen
  }
  return n.name.empty() ? nullptr : &n.name;
}

uint64_t Collector::drain(Ring& ring, Segment& segment) {
  batch_.clear();
  order_.clear();
  const size_t record_size = ring.record_size();
  while (const void* p = ring.peek()) {
    const auto* rec = static_cast<const CpuRecord*>(p);
    if (rec->kind == CpuRecord::kThreadExit) {
      note_exit(*rec);
    } else if (rec->depth > 0) {  // dial9's readers ignore samples without frames
      size_t used = std::min(record_size, sizeof(CpuRecord) + rec->depth * sizeof(uint64_t));
      order_.emplace_back(rec->timestamp_ns, static_cast<uint32_t>(batch_.size()));
      batch_.insert(batch_.end(), static_cast<const uint8_t*>(p),
                    static_cast<const uint8_t*>(p) + used);
    }
    ring.pop();
  }
  std::sort(order_.begin(), order_.end());

  Encoder& enc = segment.events();
  const uint64_t now = monotonic_ns();
  uint64_t written = 0;
  for (const auto& [ts, offset] : order_) {
    const auto* rec = reinterpret_cast<const CpuRecord*>(&batch_[offset]);
    const std::string* name = name_of(rec->tid, now);
    std::optional<std::string_view> thread_name;
    if (name) thread_name = *name;
    std::optional<uint32_t> cpu;
    if (rec->cpu != CpuRecord::kNoCpu) cpu = rec->cpu;
    uint32_t repeats = 1 + std::min(rec->overrun, kMaxRepeats - 1);
    for (uint32_t i = 0; i < repeats; ++i) {
      enc.cpu_sample(rec->timestamp_ns, rec->tid, thread_name, {rec->frames(), rec->depth}, cpu);
    }
    samples_ += repeats;
    truncated_ += rec->complete ? 0 : repeats;
    overruns_ += rec->overrun;
    written += repeats;
  }
  // Exited threads' tids may be reused by new threads: forget them once encoded.
  std::erase_if(names_, [](const auto& entry) { return entry.second.exited; });

  uint64_t drops = ring.dropped();
  dropped_ += drops - reported_drops_;
  reported_drops_ = drops;
  segment.note_events(written);
  return written;
}

StringMap Collector::close_segment() {
  StringMap m = {{"cpu.samples", std::to_string(samples_)},
                 {"cpu.truncated_samples", std::to_string(truncated_)},
                 {"cpu.dropped_samples", std::to_string(dropped_)},
                 {"cpu.timer_overruns", std::to_string(overruns_)}};
  samples_ = truncated_ = overruns_ = dropped_ = 0;
  return m;
}

}  // namespace d9::cpu
