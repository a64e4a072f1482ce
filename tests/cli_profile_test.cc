// The `d9` command's aggregation, checked exactly on segments built in memory: weights,
// variances, grouping, symbols, processes, the live set, CPU samples, filters and inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "alloc/sampler.h"
#include "cli/input.h"
#include "cli/profile.h"
#include "cli/report.h"
#include "tests/segment_builder.h"
#include "tests/test_util.h"

namespace d9::cli {
namespace {

namespace fs = std::filesystem;
using test::capture;
using test::CpuSpec;
using test::LiveSpec;
using test::SegmentBuilder;

constexpr uint64_t T0 = SegmentBuilder::kMono;
constexpr uint64_t kSec = 1'000'000'000;

StringMap meta(const std::string& boot, uint64_t rate, const std::string& liveset = "true",
               const std::string& hz = "99") {
  StringMap m = {{"boot_id", boot},
                 {"service", "svc"},
                 {"memory.track_liveset", liveset},
                 {"cpu.profile.frequency_hz", hz}};
  if (rate) m.push_back({"memory.sample_rate_bytes", std::to_string(rate)});
  return m;
}

struct File {
  std::string path;
  std::vector<uint8_t> data;
};
File seg(SegmentBuilder& b, const std::string& path = "mem.bin") {
  return {path, b.bytes()};
}

void add_one(Profile& p, const File& f) {
  EXPECT_EQ(p.add_bytes(f.path, f.data), "") << f.path;
}

template <typename... S>
void add_all(Profile& p, const S&... files) {
  (add_one(p, files), ...);
  p.finish();
}

std::string label_of(Profile& p, const std::vector<uint32_t>& key) {
  return key_string(p, key);
}

TEST(CliProfile, WeighsEachSampleThenSums) {
  const uint64_t R = 4096;
  SegmentBuilder b(meta("abcd-1", R));
  const std::vector<uint64_t> a = {0x1000, 0x2000}, c = {0x1100, 0x2000};
  const uint64_t sizes_a[] = {10, 100, 1000, 10000, 100000, 1 << 20};
  const uint64_t sizes_c[] = {64, 64, 64};
  uint64_t ts = T0;
  for (uint64_t s : sizes_a) {
    ++ts;
    b.enc().alloc_event(ts, 1, s, 0x10 + ts, a);
  }
  for (uint64_t s : sizes_c) {
    ++ts;
    b.enc().alloc_event(ts, 1, s, 0x10 + ts, c);
  }
  Profile p;
  add_all(p, seg(b));

  double wa = 0, va = 0, oa = 0, wc = 0;
  for (uint64_t s : sizes_a) {
    double w = sample_weight(s, R), q = sample_probability(s, R);
    wa += w;
    va += w * w * (1 - q);
    oa += 1 / q;
  }
  for (uint64_t s : sizes_c) wc += sample_weight(s, R);

  std::vector<Row<MemStat>> rows = group_alloc(p, Group::kStack);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(label_of(p, rows[0].key), "0x1000;0x2000");
  EXPECT_DOUBLE_EQ(rows[0].stat.bytes, wa);
  EXPECT_DOUBLE_EQ(rows[0].stat.variance, va);
  EXPECT_DOUBLE_EQ(rows[0].stat.objects, oa);
  EXPECT_DOUBLE_EQ(rows[0].stat.ci95(), 1.96 * std::sqrt(va));
  EXPECT_EQ(rows[0].stat.samples, 6u);
  EXPECT_EQ(rows[0].stat.raw_bytes, 10u + 100 + 1000 + 10000 + 100000 + (1 << 20));
  EXPECT_DOUBLE_EQ(rows[1].stat.bytes, wc);
  // Summing first and unbiasing after would be a different (biased) number.
  EXPECT_GT(std::fabs(sample_weight(192, R) - wc), 1000);
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, wa + wc);
  // A sample of 1 MiB at R = 4 KiB is certain: it adds nothing to the variance.
  EXPECT_NEAR(sample_probability(1 << 20, R), 1.0, 1e-12);
}

TEST(CliProfile, SampleRateFromMetadataElseDialDefault) {
  SegmentBuilder with(meta("abcd-1", 1000)), without(meta("efgh-2", 0));
  with.enc().alloc_event(T0 + 1, 1, 500, 0x10, std::vector<uint64_t>{0x1});
  without.enc().alloc_event(T0 + 1, 1, 500, 0x10, std::vector<uint64_t>{0x1});
  Profile p;
  add_all(p, seg(with), seg(without));
  ASSERT_EQ(p.processes.size(), 2u);
  EXPECT_EQ(p.processes[0].rate, 1000u);
  EXPECT_EQ(p.processes[1].rate, 524288u);
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, sample_weight(500, 1000) + sample_weight(500, 524288));
  // Rate 1 means every allocation: weight = size, no variance.
  SegmentBuilder every(meta("ijkl-3", 1));
  every.enc().alloc_event(T0 + 1, 1, 500, 0x10, std::vector<uint64_t>{0x1});
  Profile q;
  add_all(q, seg(every));
  EXPECT_DOUBLE_EQ(q.alloc_total().bytes, 500);
  EXPECT_DOUBLE_EQ(q.alloc_total().variance, 0);
}

TEST(CliProfile, GroupsByFunctionLineAndStack) {
  const uint64_t R = 1 << 16;
  SegmentBuilder b(meta("abcd-1", R));
  const std::vector<uint64_t> s1 = {0x1000, 0x2000}, s2 = {0x1010, 0x2000}, s3 = {0x3000, 0x2000};
  b.enc().alloc_event(T0 + 1, 1, 5000, 0x10, s1);
  b.enc().alloc_event(T0 + 2, 1, 7000, 0x20, s2);
  b.enc().alloc_event(T0 + 3, 1, 300000, 0x30, s3);
  b.symbols({{0x1000, "leaf_a", 0, "/src/a.cc", 10},
             {0x1010, "leaf_a", 0, "/src/a.cc", 12},
             {0x2000, "caller", 0, "/src/b.cc", 30},
             {0x2000, "inlined", 1, "/src/b.h", 5}});
  Profile p;
  add_all(p, seg(b));
  const double w1 = sample_weight(5000, R), w2 = sample_weight(7000, R),
               w3 = sample_weight(300000, R);

  auto fn = group_alloc(p, Group::kFunction);
  ASSERT_EQ(fn.size(), 2u);
  EXPECT_EQ(label_of(p, fn[0].key), "0x3000");  // no symbol: the address
  EXPECT_DOUBLE_EQ(fn[0].stat.bytes, w3);
  EXPECT_EQ(label_of(p, fn[1].key), "leaf_a");
  EXPECT_DOUBLE_EQ(fn[1].stat.bytes, w1 + w2);

  auto line = group_alloc(p, Group::kLine);
  ASSERT_EQ(line.size(), 3u);
  EXPECT_EQ(label_of(p, line[1].key), "leaf_a a.cc:12");
  EXPECT_EQ(label_of(p, line[2].key), "leaf_a a.cc:10");

  auto st = group_alloc(p, Group::kStack);
  ASSERT_EQ(st.size(), 2u);
  // Inlined frames come innermost first; stacks equal by name merge.
  EXPECT_EQ(label_of(p, st[0].key), "0x3000;inlined;caller");
  EXPECT_EQ(label_of(p, st[1].key), "leaf_a;inlined;caller");
  EXPECT_DOUBLE_EQ(st[1].stat.bytes, w1 + w2);
  EXPECT_EQ(site_name(p, st[1].key, Group::kStack, 2), "leaf_a <- inlined <- …");
}

TEST(CliProfile, SimplifiesCppAndRustNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"main", "main"},
      {"std::__new_allocator<char>::allocate(unsigned long, void const*)",
       "std::__new_allocator::allocate"},
      {"(anonymous namespace)::parse_request(unsigned int)",
       "(anonymous namespace)::parse_request"},
      {"operator<<(std::ostream&, int)", "operator<<"},
      {"Foo::operator()(int) const", "Foo::operator()"},
      {"operator new(unsigned long)", "operator new"},
      {"operator new[](unsigned long, std::nothrow_t const&)", "operator new[]"},
      {"void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::"
       "__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)",
       "std::vector::_M_realloc_insert"},
      {"std::__cxx11::basic_string<char>& std::vector<std::string>::emplace_back<char const*>("
       "char const*&&)",
       "std::vector::emplace_back"},
      {"decltype (::new ((void*)(0)) T(declval<A>())) std::construct_at<T, A>(T*, A&&)",
       "std::construct_at"},
      {"main::{lambda(int)#1}::operator()(int) const", "main::{lambda(int)#1}::operator()"},
      {"outer(int)::Local::run()", "outer::Local::run"},
      {"Widget::operator bool() const", "Widget::operator bool"},
      {"hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_catch",
       "hyper::proto::h1::dispatch::Dispatcher::poll_catch"},
      {"<alloc::sync::Arc<T,A> as core::ops::drop::Drop>::drop",
       "<alloc::sync::Arc<T,A> as core::ops::drop::Drop>::drop"},
      {"cold_path(int) [clone .cold]", "cold_path"},
      {"0x401000", "0x401000"},
      {"d9_je_malloc", "malloc"},
      {"d9_je__Znwm", "operator new"},
      {"d9_je__ZdlPvm", "operator delete"},
      {"je_je_sdallocx_noflags", "je_sdallocx_noflags"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(simplify_name(in), want) << in;
  EXPECT_TRUE(is_alloc_plumbing("std::vector::_M_realloc_insert"));
  EXPECT_TRUE(is_alloc_plumbing("operator new[]"));
  EXPECT_TRUE(is_alloc_plumbing("malloc"));
  EXPECT_FALSE(is_alloc_plumbing("(anonymous namespace)::parse_request"));
  EXPECT_FALSE(is_alloc_plumbing("standard_deviation"));
}

TEST(CliProfile, MemorySitesSkipAllocationPlumbingAtTheLeaf) {
  SegmentBuilder b(meta("abcd-1", 1));
  b.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1, 0x2, 0x3, 0x4});
  b.enc().alloc_event(T0 + 2, 1, 50, 0x20, std::vector<uint64_t>{0x1, 0x2});  // all plumbing
  b.symbols({{0x1, "std::__new_allocator<char>::allocate(unsigned long, void const*)", 0, "", 0},
             {0x2, "void std::vector<int>::_M_realloc_insert<int>(int&&)", 0, "/v.tcc", 9},
             {0x3, "app::fill(int)", 0, "/src/app.cc", 42},
             {0x4, "main", 0, "/src/app.cc", 50}});
  Profile p;
  add_all(p, seg(b));
  auto fn = group_alloc(p, Group::kFunction);
  ASSERT_EQ(fn.size(), 2u);
  EXPECT_EQ(label_of(p, fn[0].key), "app::fill");
  EXPECT_EQ(label_of(p, fn[1].key), "std::vector::_M_realloc_insert");  // the last one stays
  EXPECT_EQ(label_of(p, group_alloc(p, Group::kLine)[0].key), "app::fill app.cc:42");
  EXPECT_EQ(label_of(p, group_alloc(p, Group::kStack)[0].key), "app::fill;main");
  auto raw = group_alloc(p, Group::kFunction, /*trim=*/false);
  ASSERT_EQ(raw.size(), 1u);
  EXPECT_EQ(label_of(p, raw[0].key), "std::__new_allocator::allocate");
  Profile full;
  full.set_full_names(true);
  add_all(full, seg(b));
  EXPECT_EQ(label_of(full, group_alloc(full, Group::kFunction)[0].key), "app::fill(int)");
}

TEST(CliProfile, SymbolsOfALaterSegmentNameEarlierFrames) {
  SegmentBuilder s0(meta("abcd-1", 4096)), s1(meta("abcd-1", 4096));
  s0.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1000});
  s1.symbols({{0x1000, "named_later", 0, "", 0}});
  Profile p;
  add_all(p, seg(s0, "d/trace.0.bin"), seg(s1, "d/trace.1.bin"));
  ASSERT_EQ(p.processes.size(), 1u);
  EXPECT_EQ(p.processes[0].segments, 2u);
  auto fn = group_alloc(p, Group::kFunction);
  ASSERT_EQ(fn.size(), 1u);
  EXPECT_EQ(label_of(p, fn[0].key), "named_later");
  // Without file information, line grouping falls back to the function.
  EXPECT_EQ(label_of(p, group_alloc(p, Group::kLine)[0].key), "named_later");
}

TEST(CliProfile, AddressesAreScopedByProcess) {
  SegmentBuilder a(meta("abcd-1", 4096)), b(meta("efgh-2", 4096));
  a.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1000});
  a.symbols({{0x1000, "in_a", 0, "", 0}});
  b.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1000});
  b.symbols({{0x1000, "in_b", 0, "", 0}});
  Profile p;
  add_all(p, seg(a), seg(b));
  auto fn = group_alloc(p, Group::kFunction);
  ASSERT_EQ(fn.size(), 2u);
  std::set<std::string> names = {label_of(p, fn[0].key), label_of(p, fn[1].key)};
  EXPECT_EQ(names, (std::set<std::string>{"in_a", "in_b"}));
  EXPECT_EQ(p.stack_process(fn[0].rep_stack) != p.stack_process(fn[1].rep_stack), true);
}

TEST(CliProfile, LiveSetPairsFreesOnAddressAndAllocTime) {
  const uint64_t R = 4096;
  SegmentBuilder b(meta("abcd-1", R));
  const std::vector<uint64_t> s = {0x1000};
  b.enc().alloc_event(T0 + 1 * kSec, 1, 1000, 0x10, s);
  b.enc().alloc_event(T0 + 2 * kSec, 1, 2000, 0x20, s);
  b.enc().alloc_event(T0 + 3 * kSec, 2, 3000, 0x30, s);
  b.enc().free_event(T0 + 4 * kSec, 1, 0x10, 1000, T0 + 1 * kSec);  // frees the first
  b.enc().free_event(T0 + 5 * kSec, 1, 0x20, 2000, T0 + 9);  // same address, other allocation
  b.enc().free_event(T0 + 10 * kSec, 1, 0x99, 8, T0 + 7);    // its alloc was never sampled
  Profile p;
  add_all(p, seg(b));
  const LiveStat live = p.live_total();
  EXPECT_EQ(live.samples, 2u);
  EXPECT_DOUBLE_EQ(live.bytes, sample_weight(2000, R) + sample_weight(3000, R));
  auto rows = group_live(p, Group::kStack);
  ASSERT_EQ(rows.size(), 1u);
  // Ages are measured from the process's last event (the free at 10 s).
  EXPECT_EQ(rows[0].stat.oldest_ns, 8 * kSec);
  EXPECT_DOUBLE_EQ(rows[0].stat.age_sum_ns, static_cast<double>(8 * kSec + 7 * kSec));
  EXPECT_EQ(p.processes[0].free_events, 3u);
  std::string text = capture([&](FILE* f) { print_leaks(f, p, {}); });
  EXPECT_NE(text.find("without a matching FreeEvent"), std::string::npos) << text;
  EXPECT_NE(text.find("2 sampled allocations"), std::string::npos) << text;
  EXPECT_EQ(text.find("upper bounds"), std::string::npos) << text;
}

TEST(CliProfile, LiveSnapshotSupersedesPairingAndLaterEventsUpdateIt) {
  const uint64_t R = 4096;
  const std::vector<uint64_t> s = {0x1000}, t = {0x2000};
  SegmentBuilder s0(meta("abcd-1", R));
  s0.enc().alloc_event(T0 + 1, 1, 100, 0x10, s);
  s0.enc().alloc_event(T0 + 2, 1, 200, 0x20, s);
  s0.enc().alloc_event(T0 + 3, 1, 300, 0x30, s);
  // Sealed segment 1: its snapshot says only the 200-byte allocation is still live (the
  // frees of the others were dropped, say).
  SegmentBuilder s1(meta("abcd-1", R));
  s1.enc().alloc_event(T0 + 4, 1, 400, 0x40, t);
  s1.live_allocations({{1, 200, 0x20, T0 + 2, s}, {1, 400, 0x40, T0 + 4, t}});
  Profile p1;
  add_all(p1, seg(s0, "d/trace.0.bin"), seg(s1, "d/trace.1.bin"));
  EXPECT_TRUE(p1.processes[0].live_snapshot);
  EXPECT_EQ(p1.live_total().samples, 2u);
  EXPECT_DOUBLE_EQ(p1.live_total().bytes, sample_weight(200, R) + sample_weight(400, R));

  // A crashed process's last segment (.active, no snapshot) updates the last snapshot.
  SegmentBuilder s2(meta("abcd-1", R));
  s2.enc().alloc_event(T0 + 5, 1, 500, 0x50, t);
  s2.enc().free_event(T0 + 6, 1, 0x20, 200, T0 + 2);
  Profile p2;
  add_all(p2, seg(s0, "d/trace.0.bin"), seg(s1, "d/trace.1.bin"), seg(s2, "d/trace.2.bin.active"));
  EXPECT_EQ(p2.live_total().samples, 2u);
  EXPECT_DOUBLE_EQ(p2.live_total().bytes, sample_weight(400, R) + sample_weight(500, R));
  std::string text = capture([&](FILE* f) { print_leaks(f, p2, {}); });
  EXPECT_NE(text.find("Libd9LiveAllocation snapshot"), std::string::npos) << text;
}

TEST(CliProfile, LivesetOffSaysSoClearly) {
  SegmentBuilder b(meta("abcd-1", 4096, "false"));
  b.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1});
  Profile p;
  add_all(p, seg(b));
  EXPECT_EQ(p.live_total().samples, 0u);
  std::string text = capture([&](FILE* f) { print_leaks(f, p, {}); });
  EXPECT_NE(text.find("memory.track_liveset=false"), std::string::npos) << text;
  EXPECT_NE(text.find("nothing can be said about leaks"), std::string::npos) << text;
  std::string summary = capture([&](FILE* f) { print_summary(f, p, {}); });
  EXPECT_NE(summary.find("frees not tracked"), std::string::npos) << summary;
}

TEST(CliProfile, DroppedFreesMakeLiveFiguresUpperBounds) {
  SegmentBuilder b(meta("abcd-1", 4096));
  b.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1});
  b.enc().overflow_event(T0 + 2, 1, 3);
  b.enc().overflow_event(T0 + 3, 0, 2);
  Profile p;
  add_all(p, seg(b));
  EXPECT_EQ(p.dropped_allocs(), 1u);
  EXPECT_EQ(p.dropped_frees(), 5u);
  std::string leaks = capture([&](FILE* f) { print_leaks(f, p, {}); });
  EXPECT_NE(leaks.find("5 frees were dropped"), std::string::npos) << leaks;
  EXPECT_NE(leaks.find("upper bounds"), std::string::npos) << leaks;
  std::string alloc = capture([&](FILE* f) { print_alloc(f, p, {}); });
  EXPECT_NE(alloc.find("1 allocation samples were dropped"), std::string::npos) << alloc;
}

TEST(CliProfile, CpuSelfAndTotalPerFunctionAndThread) {
  SegmentBuilder b(meta("abcd-1", 4096, "true", "100"));
  std::vector<CpuSpec> cpu;
  for (int i = 0; i < 3; ++i) cpu.push_back({T0 + 1 + i, 7, 0, "main", {0x1000, 0x2000}});
  cpu.push_back({T0 + 10, 8, 0, "worker", {0x2000, 0x3000}});
  cpu.push_back({T0 + 11, 8, 0, "", {0x2000, 0x2000, 0x3000}});  // recursion counts once
  cpu.push_back({T0 + 12, 8, 1, "", {0x4000}});                  // off-CPU: not counted
  b.cpu_samples(cpu);
  b.symbols({{0x1000, "leaf", 0, "/a.cc", 1},
             {0x2000, "mid", 0, "/a.cc", 2},
             {0x3000, "root", 0, "/a.cc", 3}});
  Profile p;
  add_all(p, seg(b));
  EXPECT_EQ(p.cpu_total().samples, 5u);
  EXPECT_DOUBLE_EQ(p.cpu_total().ns, 5 * 1e9 / 100);
  EXPECT_EQ(p.processes[0].offcpu_samples, 1u);
  std::vector<CpuRow> rows = group_cpu(p, Group::kFunction);
  std::map<std::string, std::pair<uint64_t, uint64_t>> got;
  for (const CpuRow& r : rows) got[label_of(p, r.key)] = {r.self.samples, r.total.samples};
  EXPECT_EQ(got["leaf"], std::make_pair(uint64_t{3}, uint64_t{3}));
  EXPECT_EQ(got["mid"], std::make_pair(uint64_t{2}, uint64_t{5}));
  EXPECT_EQ(got["root"], std::make_pair(uint64_t{0}, uint64_t{2}));
  EXPECT_EQ(label_of(p, rows[0].key), "leaf");

  // Per thread: names ride on the samples.
  int worker = -1;
  for (size_t i = 0; i < p.threads.size(); ++i) {
    if (p.threads[i].tid == 8) worker = static_cast<int>(i);
  }
  ASSERT_GE(worker, 0);
  EXPECT_EQ(p.threads[worker].name, "worker");
  EXPECT_EQ(p.threads[worker].cpu_samples, 2u);
  std::vector<CpuRow> w = group_cpu(p, Group::kFunction, worker);
  ASSERT_FALSE(w.empty());
  EXPECT_EQ(label_of(p, w[0].key), "mid");
  EXPECT_EQ(w[0].self.samples, 2u);
  ReportOptions o;
  o.by_thread = true;
  std::string text = capture([&](FILE* f) { print_cpu(f, p, o); });
  EXPECT_NE(text.find("thread 8 (worker): 2 samples"), std::string::npos) << text;
  EXPECT_NE(text.find("thread 7 (main): 3 samples"), std::string::npos) << text;
  EXPECT_NE(text.find("1 off-CPU samples are not counted"), std::string::npos) << text;
}

TEST(CliProfile, FiltersByThread) {
  SegmentBuilder b(meta("abcd-1", 1));
  b.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1});
  b.enc().alloc_event(T0 + 2, 2, 200, 0x20, std::vector<uint64_t>{0x1});
  b.enc().alloc_event(T0 + 3, 3, 400, 0x30, std::vector<uint64_t>{0x1});
  LoadOptions o;
  o.filter.tids = {2, 3};
  Profile p(o);
  add_all(p, seg(b));
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, 600);
}

TEST(CliProfile, FiltersByRelativeAndWallClockWindow) {
  SegmentBuilder b(meta("abcd-1", 1));
  for (int s : {1, 5, 9}) {
    b.enc().alloc_event(T0 + s * kSec, 1, 100 * s, 0x10 + s, std::vector<uint64_t>{0x1});
  }
  File sg = seg(b);
  LoadOptions rel;
  std::string err;
  ASSERT_TRUE(parse_time("2", &rel.filter.from, &err)) << err;
  ASSERT_TRUE(parse_time("6s", &rel.filter.to, &err)) << err;
  Profile p(rel);
  p.set_origin(static_cast<int64_t>(SegmentBuilder::kRealtime), T0);
  add_all(p, sg);
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, 500);

  LoadOptions wall;
  const long long base = static_cast<long long>(SegmentBuilder::kRealtime / kSec);
  ASSERT_TRUE(parse_time("@" + std::to_string(base + 4), &wall.filter.from, &err)) << err;
  ASSERT_TRUE(parse_time("@" + std::to_string(base + 10), &wall.filter.to, &err)) << err;
  Profile q(wall);
  add_all(q, sg);
  EXPECT_DOUBLE_EQ(q.alloc_total().bytes, 500 + 900);

  // The same window as an ISO date in UTC: 2023-11-14T22:13:24Z is base + 4.
  LoadOptions iso;
  ASSERT_TRUE(parse_time("2023-11-14T22:13:24Z", &iso.filter.from, &err)) << err;
  Profile r(iso);
  add_all(r, sg);
  EXPECT_DOUBLE_EQ(r.alloc_total().bytes, 500 + 900);
}

TEST(CliProfile, LoadFindsTheTraceStartForRelativeWindows) {
  std::string dir = test::make_temp_dir("cli-origin");
  // Two processes; the trace starts with the earlier one.
  SegmentBuilder a(meta("abcd-1", 1), T0, SegmentBuilder::kRealtime);
  a.enc().alloc_event(T0 + 1 * kSec, 1, 1, 0x10, std::vector<uint64_t>{0x1});
  SegmentBuilder b(meta("efgh-2", 1), T0 + 3 * kSec, SegmentBuilder::kRealtime + 3 * kSec);
  b.enc().alloc_event(T0 + 4 * kSec, 1, 10, 0x10, std::vector<uint64_t>{0x1});
  test::write_bytes(dir + "/abcd-1/trace.0.bin", a.bytes());
  test::write_bytes(dir + "/efgh-2/trace.0.bin", b.bytes());
  LoadOptions o;
  std::string err;
  ASSERT_TRUE(parse_time("2", &o.filter.from, &err));
  o.progress = false;
  Profile p(o);
  ASSERT_TRUE(p.load(collect_inputs({dir})));
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, 10);
  fs::remove_all(dir);
}

TEST(CliProfile, FiltersByPidAndProcess) {
  SegmentBuilder a(meta("abcd-100", 1)), b(meta("efgh-200", 1));
  a.enc().alloc_event(T0 + 1, 1, 100, 0x10, std::vector<uint64_t>{0x1});
  b.enc().alloc_event(T0 + 1, 1, 200, 0x10, std::vector<uint64_t>{0x1});
  LoadOptions by_pid;
  by_pid.filter.pids = {"200"};
  Profile p(by_pid);
  add_all(p, seg(a), seg(b));
  EXPECT_DOUBLE_EQ(p.alloc_total().bytes, 200);
  EXPECT_EQ(p.skipped, 1u);
  LoadOptions by_boot;
  by_boot.filter.processes = {"abcd-100"};
  Profile q(by_boot);
  add_all(q, seg(a), seg(b));
  EXPECT_DOUBLE_EQ(q.alloc_total().bytes, 100);
  ASSERT_EQ(q.processes.size(), 1u);
  EXPECT_EQ(q.processes[0].pid, "100");
}

TEST(CliProfile, ParsesTimes) {
  TimeBound b;
  std::string err;
  ASSERT_TRUE(parse_time("1.5", &b, &err));
  EXPECT_EQ(b.kind, TimeBound::kRelative);
  EXPECT_DOUBLE_EQ(b.seconds, 1.5);
  ASSERT_TRUE(parse_time("300ms", &b, &err));
  EXPECT_DOUBLE_EQ(b.seconds, 0.3);
  ASSERT_TRUE(parse_time("2m", &b, &err));
  EXPECT_DOUBLE_EQ(b.seconds, 120);
  ASSERT_TRUE(parse_time("@1700000000.25", &b, &err));
  EXPECT_EQ(b.kind, TimeBound::kWall);
  EXPECT_EQ(b.wall_ns, 1700000000250000000LL);
  ASSERT_TRUE(parse_time("2023-11-14T22:13:20.5Z", &b, &err)) << err;
  EXPECT_EQ(b.wall_ns, 1700000000500000000LL);
  ASSERT_TRUE(parse_time("2023-11-15T00:13:20+02:00", &b, &err)) << err;
  EXPECT_EQ(b.wall_ns, 1700000000000000000LL);
  EXPECT_FALSE(parse_time("soon", &b, &err));
  EXPECT_NE(err.find("soon"), std::string::npos);
  EXPECT_FALSE(parse_time("5 parsecs", &b, &err));
  EXPECT_FALSE(parse_time("2023-13-45", &b, &err));
}

// The live set's hash table against std::map, through growth and many deletions (the
// backward-shift deletion must keep every probe run intact).
TEST(CliLiveTable, MatchesAReferenceMap) {
  LiveTable t;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> ref;
  uint64_t rng = 88172645463325252ULL;
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  for (int i = 0; i < 200000; ++i) {
    // Few distinct addresses (reuse) and clustered timestamps: long probe runs.
    uint64_t addr = 0x1000 + (next() % 512) * 16, ts = next() % 4096;
    if (next() % 3) {
      t.insert(addr, ts, {1, 2, addr ^ ts, 4});
      ref[{addr, ts}] = addr ^ ts;
    } else {
      EXPECT_EQ(t.erase(addr, ts), ref.erase({addr, ts}) == 1);
    }
    if (i % 50000 == 0) {
      ASSERT_EQ(t.size(), ref.size());
    }
  }
  ASSERT_EQ(t.size(), ref.size());
  size_t seen = 0;
  t.for_each([&](uint64_t addr, uint64_t ts, const LiveAlloc& v) {
    auto it = ref.find({addr, ts});
    ASSERT_NE(it, ref.end());
    EXPECT_EQ(v.size, it->second);
    ++seen;
  });
  EXPECT_EQ(seen, ref.size());
  for (const auto& [k, v] : ref) EXPECT_TRUE(t.erase(k.first, k.second));
  EXPECT_TRUE(t.empty());
}

TEST(CliInputs, DirectoriesAreSearchedRecursivelyInSegmentOrder) {
  std::string dir = test::make_temp_dir("cli-inputs");
  for (const char* f : {"p1/trace.10.bin", "p1/trace.2.bin.zst", "p1/trace.11.bin.active",
                        "p1/trace.1.bin.gz", "p2/deeper/trace.0.bin", "p1/notes.txt"}) {
    test::write_bytes(dir + "/" + f, {'x'});
  }
  std::vector<std::string> missing;
  std::vector<std::string> got =
      collect_inputs({dir, dir + "/p1/trace.10.bin", dir + "/nope"}, &missing);
  std::vector<std::string> want;
  for (const char* f : {"p1/trace.1.bin.gz", "p1/trace.2.bin.zst", "p1/trace.10.bin",
                        "p1/trace.11.bin.active", "p2/deeper/trace.0.bin"}) {
    want.push_back(dir + "/" + f);
  }
  EXPECT_EQ(got, want);  // the file named twice is read once
  EXPECT_EQ(missing, std::vector<std::string>{dir + "/nope"});
  fs::remove_all(dir);
}

TEST(CliInputs, ContainersAreToldByMagicBytes) {
  SegmentBuilder b(meta("abcd-1", 4096));
  for (int i = 0; i < 100; ++i) {
    b.enc().alloc_event(T0 + i, 1, 100 + i, 0x10 + i, std::vector<uint64_t>{0x1, 0x2});
  }
  std::string dir = test::make_temp_dir("cli-containers");
  // Names that lie about the container: only the magic bytes count.
  test::write_bytes(dir + "/raw/trace.0.bin.zst", b.bytes());
  test::write_bytes(dir + "/gz/trace.0.bin", test::gzip_compress(b.bytes()));
  test::write_bytes(dir + "/zst/trace.0.bin.active", test::zstd_compress(b.bytes()));
  // Several gzip members / zstd frames back to back (no single size up front).
  const std::vector<uint8_t> all = b.bytes();
  const std::vector<uint8_t> half1(all.begin(), all.begin() + all.size() / 2),
      half2(all.begin() + all.size() / 2, all.end());
  std::vector<uint8_t> gz2 = test::gzip_compress(half1), zst2 = test::zstd_compress(half1);
  for (uint8_t c : test::gzip_compress(half2)) gz2.push_back(c);
  for (uint8_t c : test::zstd_compress(half2)) zst2.push_back(c);
  test::write_bytes(dir + "/gz2/trace.0.bin.gz", gz2);
  test::write_bytes(dir + "/zst2/trace.0.bin.zst", zst2);
  double bytes = -1;
  for (const char* sub : {"raw", "gz", "zst", "gz2", "zst2"}) {
    LoadOptions o;
    o.progress = false;
    Profile p(o);
    ASSERT_TRUE(p.load(collect_inputs({dir + "/" + sub})));
    EXPECT_EQ(p.damaged, 0u) << sub;
    EXPECT_EQ(p.alloc_total().samples, 100u) << sub;
    if (bytes < 0) bytes = p.alloc_total().bytes;
    EXPECT_DOUBLE_EQ(p.alloc_total().bytes, bytes) << sub;
  }
  fs::remove_all(dir);
}

// Truncated and corrupt files: a message naming the file and the offset, the rest analysed.
TEST(CliInputs, TruncatedInputKeepsWhatCameBefore) {
  SegmentBuilder b(meta("abcd-1", 1));
  for (int i = 0; i < 1000; ++i) {
    b.enc().alloc_event(T0 + i, 1, 1, 0x10 + i, std::vector<uint64_t>{0x1, uint64_t(i % 7)});
  }
  std::vector<uint8_t> full = b.bytes();
  std::vector<uint8_t> cut(full.begin(), full.begin() + full.size() * 6 / 10);
  std::vector<uint8_t> zcut = test::zstd_compress(full);
  zcut.resize(zcut.size() * 6 / 10);
  std::vector<uint8_t> gcut = test::gzip_compress(full);
  gcut.resize(gcut.size() * 6 / 10);
  for (const auto& [name, data] : std::vector<std::pair<std::string, std::vector<uint8_t>>>{
           {"raw", cut}, {"zstd", zcut}, {"gzip", gcut}}) {
    Profile p;
    std::string error = p.add_bytes("dir/trace.3.bin", data);
    p.finish();
    EXPECT_EQ(error.rfind("dir/trace.3.bin: ", 0), 0u) << name << ": " << error;
    EXPECT_NE(error.find("offset"), std::string::npos) << name << ": " << error;
    EXPECT_NE(error.find("truncated"), std::string::npos) << name << ": " << error;
    EXPECT_EQ(p.damaged, 1u);
    // zstd emits nothing of a block until it is complete, and this trace is one block.
    if (name == "zstd") continue;
    EXPECT_NE(error.find("kept the"), std::string::npos) << name << ": " << error;
    EXPECT_GT(p.alloc_total().samples, 100u) << name;
    EXPECT_LT(p.alloc_total().samples, 1000u) << name;
    EXPECT_EQ(p.unreadable, 0u);
  }
  Profile junk;
  std::string error = junk.add_bytes("junk.bin", std::vector<uint8_t>{'n', 'o', 'p', 'e'});
  EXPECT_EQ(junk.unreadable, 1u);
  EXPECT_NE(error.find("nothing readable"), std::string::npos) << error;
  EXPECT_NE(error.find("at offset 0"), std::string::npos) << error;
  // Truncated at every offset of a small trace: never crashes, never over-counts.
  for (size_t n = 0; n < full.size() && n < 3000; n += 7) {
    Profile p;
    p.add_bytes("x", std::vector<uint8_t>(full.begin(), full.begin() + n));
    p.finish();
    EXPECT_LE(p.alloc_total().samples, 1000u);
  }
}

}  // namespace
}  // namespace d9::cli
