// The `d9` command's outputs: folded stacks, the SVG flame graph, pprof (checked with our own
// protobuf reading and with the independent npm reader `pprof-format`), JSON lines, the JSON
// reports, and the exit statuses of the binary on damaged input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "alloc/sampler.h"
#include "cli/export.h"
#include "cli/flame.h"
#include "cli/profile.h"
#include "cli/report.h"
#include "tests/segment_builder.h"
#include "tests/test_util.h"
#include "writer/trace.h"

namespace d9::cli {
namespace {

namespace fs = std::filesystem;
using test::capture;
using test::CpuSpec;
using test::SegmentBuilder;

constexpr uint64_t T0 = SegmentBuilder::kMono;
constexpr uint64_t R = 8192;

StringMap meta(const std::string& boot) {
  return {{"boot_id", boot},
          {"service", "shop"},
          {"memory.sample_rate_bytes", std::to_string(R)},
          {"memory.track_liveset", "true"},
          {"cpu.profile.frequency_hz", "100"}};
}

// Two allocation stacks (one through an inlined frame), one free, CPU samples, symbols.
SegmentBuilder sample_segment() {
  SegmentBuilder b(meta("abcd-42"));
  const std::vector<uint64_t> s1 = {0x1000, 0x2000, 0x3000}, s2 = {0x1100, 0x3000};
  b.enc().alloc_event(T0 + 1, 7, 1000, 0xa0, s1);
  b.enc().alloc_event(T0 + 2, 7, 3000, 0xb0, s1);
  b.enc().alloc_event(T0 + 3, 7, 50000, 0xc0, s2);
  b.enc().free_event(T0 + 4, 7, 0xa0, 1000, T0 + 1);
  b.cpu_samples({{T0 + 5, 7, 0, "main", {0x1000, 0x2000, 0x3000}},
                 {T0 + 6, 7, 0, "main", {0x1000, 0x2000, 0x3000}},
                 {T0 + 7, 9, 0, "io", {0x1100, 0x3000}}});
  b.symbols({{0x1000, "operator<<", 0, "/src/leaf.cc", 11},
             {0x2000, "caller", 0, "/src/caller.cc", 22},
             {0x2000, "helper", 1, "/src/helper.h", 3},
             {0x3000, "main", 0, "/src/main.cc", 33}});
  return b;
}

Profile loaded() {
  SegmentBuilder b = sample_segment();
  Profile p;
  EXPECT_EQ(p.add_bytes("abcd-42/trace.0.bin", b.bytes()), "");
  p.finish();
  return p;
}

TEST(CliFlame, FoldedStacksAreRootFirstWithEstimatedValues) {
  Profile p = loaded();
  std::string alloc = capture(
      [&](FILE* f) { write_folded(f, folded_stacks(p, Kind::kAlloc, Group::kFunction, false)); });
  char want[256];
  snprintf(want, sizeof(want), "main;caller;helper;operator<< %lld\nmain;0x1100 %lld\n",
           std::llround(sample_weight(1000, R) + sample_weight(3000, R)),
           std::llround(sample_weight(50000, R)));
  // Sorted by stack text: "main;0x1100" < "main;caller…".
  std::string a(want);
  std::string first = a.substr(a.find('\n') + 1), second = a.substr(0, a.find('\n') + 1);
  EXPECT_EQ(alloc, first + second);

  std::string live = capture(
      [&](FILE* f) { write_folded(f, folded_stacks(p, Kind::kLive, Group::kFunction, false)); });
  EXPECT_NE(live.find("main;caller;helper;operator<< " +
                      std::to_string(std::llround(sample_weight(3000, R)))),
            std::string::npos)
      << live;

  std::string cpu =
      capture([&](FILE* f) { write_folded(f, folded_stacks(p, Kind::kCpu, Group::kLine, true)); });
  EXPECT_EQ(cpu,
            "thread 7 (main);main main.cc:33;caller caller.cc:22;helper helper.h:3;operator<< "
            "leaf.cc:11 2\n"
            "thread 9 (io);main main.cc:33;0x1100 1\n");
}

TEST(CliFlame, SvgIsSelfContainedAndInteractive) {
  Profile p = loaded();
  FlameOptions o;
  o.kind = Kind::kCpu;
  o.title = "t<&>";
  std::string svg = capture([&](FILE* f) {
    write_flame_svg(f, folded_stacks(p, Kind::kCpu, Group::kFunction, false), o);
  });
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<script type=\"text/ecmascript\"><![CDATA["), std::string::npos);
  for (const char* fn : {"function zoom(", "function doSearch(", "function resetZoom(",
                         "function init(", "onload=\"init()\""}) {
    EXPECT_NE(svg.find(fn), std::string::npos) << fn;
  }
  EXPECT_NE(svg.find("t&lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("data-n=\"operator&lt;&lt;\""), std::string::npos);
  EXPECT_EQ(svg.find("operator<<"), std::string::npos) << "names must be escaped";
  // No external resources: the only URL is the SVG namespace.
  size_t urls = 0;
  for (size_t pos = 0; (pos = svg.find("http", pos)) != std::string::npos; ++pos) ++urls;
  EXPECT_EQ(urls, 1u);
  // all, main, caller, helper, operator<<, 0x1100.
  size_t frames = 0;
  for (size_t pos = 0; (pos = svg.find("<g data-n=", pos)) != std::string::npos; ++pos) ++frames;
  EXPECT_EQ(frames, 6u);
  EXPECT_NE(svg.find("data-n=\"all\" data-x=\"0.0000000000\" data-w=\"1.0000000000\""),
            std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

// A tiny protobuf reader, enough to walk profile.proto.
struct PbField {
  int field;
  int wire;
  uint64_t v;            // varint
  std::string_view len;  // length-delimited
};
std::vector<PbField> pb_fields(std::string_view d) {
  std::vector<PbField> out;
  size_t i = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0; i < d.size(); shift += 7) {
      uint8_t b = static_cast<uint8_t>(d[i++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < d.size()) {
    uint64_t key = varint();
    PbField f{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, {}};
    if (f.wire == 0) {
      f.v = varint();
    } else if (f.wire == 2) {
      uint64_t n = varint();
      f.len = d.substr(i, n);
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    out.push_back(f);
  }
  return out;
}
std::vector<uint64_t> pb_packed(std::string_view d) {
  std::vector<uint64_t> out;
  size_t i = 0;
  while (i < d.size()) {
    uint64_t v = 0;
    for (int shift = 0; i < d.size(); shift += 7) {
      uint8_t b = static_cast<uint8_t>(d[i++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) break;
    }
    out.push_back(v);
  }
  return out;
}

TEST(CliPprof, ProtobufCarriesTypesSamplesAndSymbols) {
  Profile p = loaded();
  std::string pb = build_pprof(p, PprofKind::kHeap);
  std::vector<std::string> strings;
  std::vector<std::string_view> samples, types, functions, locations;
  for (const PbField& f : pb_fields(pb)) {
    if (f.field == 6) strings.emplace_back(f.len);
    if (f.field == 1) types.push_back(f.len);
    if (f.field == 2) samples.push_back(f.len);
    if (f.field == 4) locations.push_back(f.len);
    if (f.field == 5) functions.push_back(f.len);
  }
  ASSERT_FALSE(strings.empty());
  EXPECT_EQ(strings[0], "");
  std::vector<std::string> type_names;
  for (std::string_view t : types) {
    auto fs = pb_fields(t);
    type_names.push_back(strings[fs[0].v] + "/" + strings[fs[1].v]);
  }
  EXPECT_EQ(type_names, (std::vector<std::string>{"alloc_objects/count", "alloc_space/bytes",
                                                  "inuse_objects/count", "inuse_space/bytes"}));
  ASSERT_EQ(samples.size(), 2u);
  std::map<size_t, std::vector<uint64_t>> by_depth;  // stack depth -> values
  for (std::string_view s : samples) {
    std::vector<uint64_t> locs, values;
    for (const PbField& f : pb_fields(s)) {
      if (f.field == 1) locs = pb_packed(f.len);
      if (f.field == 2) values = pb_packed(f.len);
    }
    by_depth[locs.size()] = values;
  }
  const double w1 = sample_weight(1000, R), w3 = sample_weight(3000, R);
  EXPECT_EQ(by_depth[3][1], static_cast<uint64_t>(std::llround(w1 + w3)));
  EXPECT_EQ(by_depth[3][3], static_cast<uint64_t>(std::llround(w3)));  // 1000 was freed
  EXPECT_EQ(by_depth[3][2], static_cast<uint64_t>(std::llround(1 / sample_probability(3000, R))));
  EXPECT_EQ(by_depth[2][1], static_cast<uint64_t>(std::llround(sample_weight(50000, R))));
  // The inlined frame is one location with two lines, innermost first.
  bool found_inline = false;
  for (std::string_view l : locations) {
    int lines = 0;
    for (const PbField& f : pb_fields(l)) lines += f.field == 4;
    if (lines == 2) found_inline = true;
  }
  EXPECT_TRUE(found_inline);
  EXPECT_EQ(functions.size(), 4u);
}

// A frame the writer could not resolve comes with an "[unknown] 0x…" placeholder symbol;
// where the module map knows its module, the module and file offset say more.
TEST(CliProfile, UnknownPlaceholderReadsAsModuleAndOffset) {
  SegmentBuilder b(meta("abcd-42"));
  b.enc().module_entry("/usr/lib/libstdc++.so.6", "0badc0de", 0x7000, 0x9000, 0x6000, true);
  b.enc().alloc_event(T0 + 1, 7, 1 << 20, 0xa0, std::vector<uint64_t>{0x7100, 0x1234});
  b.enc().symbol_entry(0x7100, 0, "[unknown] 0x7100", 0, "/usr/lib/libstdc++.so.6", 0);
  b.enc().symbol_entry(0x1234, 0, "[unknown] 0x1234", 0, "", 0);
  Profile p;
  EXPECT_EQ(p.add_bytes("abcd-42/trace.0.bin", b.bytes()), "");
  p.finish();
  auto rows = group_alloc(p, Group::kStack);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(key_string(p, rows[0].key), "libstdc++.so.6+0x1100;0x1234");
}

// With a module map (Libd9Module) and no symbols: frames read "libfoo.so+0x1100", JSON
// frames name their module, and pprof gets a mapping per module with path and build-id.
TEST(CliPprof, ModuleMapGivesMappingsAndModuleRelativeNames) {
  SegmentBuilder b(meta("abcd-42"));
  b.enc().module_entry("/usr/lib/libfoo.so", "0badc0de", 0x7000, 0x9000, 0x6000, true);
  b.enc().module_entry("/usr/bin/app", "feedface", 0x400000, 0x500000, 0, true);
  b.enc().alloc_event(T0 + 1, 7, 1 << 20, 0xa0, std::vector<uint64_t>{0x7100, 0x401000, 0x1234});
  Profile p;
  EXPECT_EQ(p.add_bytes("abcd-42/trace.0.bin", b.bytes()), "");
  p.finish();
  auto rows = group_alloc(p, Group::kStack);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(key_string(p, rows[0].key), "libfoo.so+0x1100;app+0x401000;0x1234");
  ReportOptions o;
  o.json = true;
  std::string js = capture([&](FILE* f) { print_alloc(f, p, o); });
  EXPECT_NE(
      js.find("{\"addr\":\"0x7100\",\"module\":\"/usr/lib/libfoo.so\",\"offset\":\"0x1100\"}"),
      std::string::npos)
      << js;

  std::string pb = build_pprof(p, PprofKind::kAlloc);
  std::vector<std::string> strings;
  std::vector<std::string_view> mappings;
  for (const PbField& f : pb_fields(pb)) {
    if (f.field == 6) strings.emplace_back(f.len);
    if (f.field == 3) mappings.push_back(f.len);
  }
  ASSERT_EQ(mappings.size(), 3u);
  std::map<std::string, std::map<int, uint64_t>> by_file;
  for (std::string_view m : mappings) {
    std::map<int, uint64_t> fields;
    for (const PbField& f : pb_fields(m)) fields[f.field] = f.v;
    by_file[strings[fields[5]]] = fields;
  }
  ASSERT_TRUE(by_file.count("/usr/lib/libfoo.so"));
  EXPECT_EQ(by_file["/usr/lib/libfoo.so"][2], 0x7000u);
  EXPECT_EQ(by_file["/usr/lib/libfoo.so"][3], 0x9000u);
  EXPECT_EQ(by_file["/usr/lib/libfoo.so"][4], 0x1000u);
  EXPECT_EQ(strings[by_file["/usr/lib/libfoo.so"][6]], "0badc0de");
  EXPECT_EQ(strings[by_file["/usr/bin/app"][6]], "feedface");
  ASSERT_TRUE(by_file.count("shop"));  // 0x1234 is in no module: the process's own mapping
  EXPECT_EQ(by_file["shop"][2], 0x1234u);
}

// The acceptance check: an independent reader (npm `pprof-format`) decodes our export.
TEST(CliPprof, IndependentReaderDecodesTheExport) {
  if (system("command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "npm/node not installed: cannot check with the pprof-format reader";
  }
  fs::path dir = fs::path(D9_BUILD_DIR) / "test-tmp" / "npm-pprof-format";
  if (!fs::exists(dir / "node_modules" / "pprof-format")) {
    fs::create_directories(dir);
    std::string cmd = "cd '" + dir.string() +
                      "' && timeout 300 npm install --no-audit --no-fund --silent "
                      "pprof-format@2 >npm.log 2>&1";
    if (system(cmd.c_str()) != 0) {
      GTEST_SKIP() << "npm install pprof-format failed (offline?); see " << dir / "npm.log";
    }
  }
  Profile p = loaded();
  std::string path = (dir / "heap.pb.gz").string();
  ASSERT_TRUE(write_file(path, gzip(build_pprof(p, PprofKind::kHeap))));
  std::string cpu_path = (dir / "cpu.pb.gz").string();
  ASSERT_TRUE(write_file(cpu_path, gzip(build_pprof(p, PprofKind::kCpu))));
  std::ofstream(dir / "read.js") << R"JS(
const { Profile } = require('pprof-format');
const zlib = require('zlib'), fs = require('fs');
const p = Profile.decode(zlib.gunzipSync(fs.readFileSync(process.argv[2])));
const s = p.stringTable.strings;
console.log('types ' + p.sampleType.map(t => s[t.type] + '/' + s[t.unit]).join(','));
console.log('period ' + s[p.periodType.type] + ' ' + Number(p.period));
for (const smp of p.sample) {
  const frames = smp.locationId.map(id => {
    const l = p.location.find(l => Number(l.id) === Number(id));
    const names = l.line.map(ln => s[p.function.find(f => Number(f.id) === Number(ln.functionId)).name]);
    return names.length ? names.join('|') : '0x' + Number(l.address).toString(16);
  });
  const labels = smp.label.map(l => s[l.key] + '=' + (l.str ? s[l.str] : Number(l.num))).join(',');
  console.log('sample ' + smp.value.map(Number).join(',') + ' ' + frames.join(';') + (labels ? ' ' + labels : ''));
}
)JS";
  test::Shell heap = test::shell("node '" + (dir / "read.js").string() + "' '" + path + "'");
  ASSERT_EQ(heap.status, 0) << heap.err;
  const long long w13 = std::llround(sample_weight(1000, R) + sample_weight(3000, R));
  const long long o13 =
      std::llround(1 / sample_probability(1000, R) + 1 / sample_probability(3000, R));
  const long long o3 = std::llround(1 / sample_probability(3000, R));
  const long long w3 = std::llround(sample_weight(3000, R));
  std::ostringstream want;
  want << "sample " << o13 << "," << w13 << "," << o3 << "," << w3
       << " operator<<;helper|caller;main";
  EXPECT_NE(heap.out.find("types alloc_objects/count,alloc_space/bytes,inuse_objects/count,"
                          "inuse_space/bytes"),
            std::string::npos)
      << heap.out;
  EXPECT_NE(heap.out.find(want.str()), std::string::npos) << heap.out << "\nwant: " << want.str();
  EXPECT_NE(heap.out.find(" 0x1100;main"), std::string::npos) << heap.out;
  EXPECT_NE(heap.out.find("period space " + std::to_string(R)), std::string::npos) << heap.out;

  test::Shell cpu = test::shell("node '" + (dir / "read.js").string() + "' '" + cpu_path + "'");
  ASSERT_EQ(cpu.status, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("types samples/count,cpu/nanoseconds"), std::string::npos) << cpu.out;
  EXPECT_NE(cpu.out.find("period cpu 10000000"), std::string::npos) << cpu.out;
  EXPECT_NE(cpu.out.find("sample 2,20000000 operator<<;helper|caller;main tid=7,thread=main"),
            std::string::npos)
      << cpu.out;
}

TEST(CliExport, JsonLinesHaveOneEventPerLine) {
  SegmentBuilder b = sample_segment();
  std::string dir = test::make_temp_dir("cli-jsonl");
  test::write_bytes(dir + "/abcd-42/trace.0.bin", b.bytes());
  decode::Trace t = decode::DecodeTrace(b.bytes());
  uint64_t events = 0;
  for (const auto& [name, n] : t.event_counts) events += n;
  LoadOptions o;
  std::string out = capture([&](FILE* f) { EXPECT_EQ(export_jsonl({dir}, o, f), 0u); });
  EXPECT_EQ(out, "") << "a directory is not a segment: callers expand it first";
  out = capture([&](FILE* f) { EXPECT_EQ(export_jsonl(collect_inputs({dir}), o, f), 1u); });
  std::istringstream in(out);
  std::string line;
  uint64_t lines = 0, allocs = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(line.rfind("{\"file\":", 0), 0u) << line;
    EXPECT_EQ(line.back(), '}') << line;
    if (line.find("\"event\":\"AllocEvent\"") != std::string::npos) {
      ++allocs;
      EXPECT_NE(line.find("\"est_bytes\":"), std::string::npos) << line;
      EXPECT_NE(line.find("\"process\":\"abcd-42\""), std::string::npos) << line;
    }
  }
  EXPECT_EQ(lines, events);
  EXPECT_EQ(allocs, 3u);
  EXPECT_NE(out.find("\"callchain\":[\"0x1000\",\"0x2000\",\"0x3000\"],\"callchain_symbols\":"
                     "[\"operator<<\",\"helper < caller\",\"main\"]"),
            std::string::npos)
      << out;
  // --tid keeps only that thread's events (and the events that have no thread).
  o.filter.tids = {9};
  out = capture([&](FILE* f) { export_jsonl(collect_inputs({dir}), o, f); });
  EXPECT_EQ(out.find("\"tid\":7"), std::string::npos);
  EXPECT_NE(out.find("\"tid\":9"), std::string::npos);
  fs::remove_all(dir);
}

TEST(CliReports, JsonAllocReportListsSitesWithFrames) {
  Profile p = loaded();
  ReportOptions o;
  o.json = true;
  std::string js = capture([&](FILE* f) { print_alloc(f, p, o); });
  EXPECT_EQ(js.front(), '{');
  EXPECT_NE(js.find("\"group\":\"stack\""), std::string::npos);
  EXPECT_NE(js.find("\"labels\":[\"0x1100\",\"main\"]"), std::string::npos) << js;
  EXPECT_NE(js.find("{\"addr\":\"0x1000\",\"function\":\"operator<<\",\"file\":\"/src/leaf.cc\","
                    "\"line\":11}"),
            std::string::npos)
      << js;
  EXPECT_NE(js.find("\"function\":\"helper < caller\",\"file\":\"/src/helper.h\""),
            std::string::npos)
      << js;
  std::string text = capture([&](FILE* f) { print_summary(f, p, ReportOptions{}); });
  for (const char* want :
       {"processes: 1, threads: 2", "3 on-CPU at 100 Hz",
        "allocation samples: 3 at a mean rate of one per 8.00 KiB", "top allocation sites",
        "top CPU functions", "top live sites", "2023-11-14"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

TEST(CliReports, DiffShowsPerSiteChangeAndCpuShare) {
  SegmentBuilder a(meta("abcd-1")), b(meta("efgh-2"));
  a.enc().alloc_event(T0 + 1, 1, 1 << 20, 0x10, std::vector<uint64_t>{0x1000});
  a.symbols({{0x1000, "grows", 0, "", 0}});
  b.enc().alloc_event(T0 + 1, 1, 1 << 20, 0x10, std::vector<uint64_t>{0x5000});
  b.enc().alloc_event(T0 + 2, 1, 1 << 20, 0x20, std::vector<uint64_t>{0x5000});
  b.enc().alloc_event(T0 + 3, 1, 1 << 21, 0x30, std::vector<uint64_t>{0x6000});
  b.cpu_samples({{T0 + 5, 1, 0, "", {0x5000}}});
  // ASLR: the same function at another address in B.
  b.symbols({{0x5000, "grows", 0, "", 0}, {0x6000, "new_site", 0, "", 0}});
  Profile pa, pb;
  pa.add_bytes("a", a.bytes());
  pa.finish();
  pb.add_bytes("b", b.bytes());
  pb.finish();
  ReportOptions o;
  o.group = Group::kFunction;
  std::string text = capture([&](FILE* f) { print_diff(f, pa, pb, "A", "B", o); });
  auto line_of = [&](const std::string& name, size_t from) {
    size_t at = text.find(name, from);
    if (at == std::string::npos) return std::string();
    size_t start = text.rfind('\n', at) + 1;
    return text.substr(start, text.find('\n', at) - start);
  };
  std::string added = line_of("new_site", 0);
  EXPECT_NE(added.find("+2.00 MiB"), std::string::npos) << text;
  EXPECT_NE(added.find(" new "), std::string::npos) << text;
  std::string grown = line_of("grows", 0);
  EXPECT_NE(grown.find("+1.00 MiB"), std::string::npos) << text;
  EXPECT_NE(grown.find("+100.0%"), std::string::npos) << text;
  std::string cpu = line_of("grows", text.find("CPU share"));
  EXPECT_NE(cpu.find("+100.0pp"), std::string::npos) << text;
}

// The binary's contract on damaged input: a line naming the file and offset, the rest
// analysed, exit status 1 only when nothing was readable.
TEST(CliBinary, DamagedInputExitStatus) {
  SegmentBuilder b = sample_segment();
  std::vector<uint8_t> full = b.bytes();
  std::string dir = test::make_temp_dir("cli-damaged");
  test::write_bytes(dir + "/abcd-42/trace.0.bin", full);
  test::write_bytes(dir + "/abcd-42/trace.1.bin.active",
                    std::vector<uint8_t>(full.begin(), full.begin() + full.size() / 2));
  test::write_bytes(dir + "/junk/trace.0.bin.zst", {0x28, 0xB5, 0x2F, 0xFD, 1, 2, 3});
  const std::string d9 = test::d9_binary();

  test::Shell all = test::shell(d9 + " alloc --no-progress " + dir);
  EXPECT_EQ(all.status, 0) << all.err;
  EXPECT_NE(all.err.find(dir + "/abcd-42/trace.1.bin.active: truncated"), std::string::npos)
      << all.err;
  EXPECT_NE(all.err.find(" at offset "), std::string::npos) << all.err;
  EXPECT_NE(all.err.find(dir + "/junk/trace.0.bin.zst: zstd"), std::string::npos) << all.err;
  EXPECT_NE(all.out.find("2 segment(s)"), std::string::npos) << all.out;

  test::Shell junk = test::shell(d9 + " summary " + dir + "/junk");
  EXPECT_EQ(junk.status, 1);
  EXPECT_NE(junk.err.find("nothing readable"), std::string::npos) << junk.err;

  test::Shell none = test::shell(d9 + " alloc " + dir + "/does-not-exist");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("no such file or directory"), std::string::npos) << none.err;

  EXPECT_EQ(test::shell(d9 + " alloc --group nonsense " + dir).status, 2);
  EXPECT_EQ(test::shell(d9 + " frobnicate " + dir).status, 2);
  test::Shell help = test::shell(d9 + " --help");
  EXPECT_EQ(help.status, 0);
  for (const char* cmd : {"summary", "alloc", "leaks", "cpu", "flame", "export", "diff", "run",
                          "--group", "--from", "--tid", "--pid", "--process", "--folded",
                          "--format", "--kind", "--rate", "--no-liveset", "--cpu-hz"}) {
    EXPECT_NE(help.out.find(cmd), std::string::npos) << cmd;
  }
  EXPECT_NE(help.out.find("symbolize"), std::string::npos);  // d9 symbolize has landed
  fs::remove_all(dir);
}

TEST(CliBinary, FlameAndExportWriteFiles) {
  SegmentBuilder b = sample_segment();
  std::string dir = test::make_temp_dir("cli-files");
  test::write_bytes(dir + "/abcd-42/trace.0.bin", b.bytes());
  const std::string d9 = test::d9_binary();
  test::Shell svg = test::shell(d9 + " flame " + dir + " --kind alloc -o " + dir + "/a.svg");
  EXPECT_EQ(svg.status, 0) << svg.err;
  EXPECT_TRUE(fs::file_size(dir + "/a.svg") > 1000);
  test::Shell folded = test::shell(d9 + " flame " + dir + " --kind cpu --folded");
  EXPECT_EQ(folded.status, 0) << folded.err;
  EXPECT_EQ(folded.out, "main;0x1100 1\nmain;caller;helper;operator<< 2\n");
  test::Shell pprof =
      test::shell(d9 + " export " + dir + " --format pprof --kind live -o " + dir + "/l.pb.gz");
  EXPECT_EQ(pprof.status, 0) << pprof.err;
  std::ifstream f(dir + "/l.pb.gz", std::ios::binary);
  unsigned char magic[2] = {0, 0};
  f.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace d9::cli
