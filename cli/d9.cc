// d9: answers from dial9 segments written by libd9.so. `d9 --help` lists the commands.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/dump.h"
#include "cli/export.h"
#include "cli/flame.h"
#include "cli/html_report.h"
#include "cli/input.h"
#include "cli/profile.h"
#include "cli/report.h"
#include "cli/run.h"
#include "cli/symbolize.h"
#include "cli/time_views.h"
#include "cli/timeline.h"
#include "ship/commands.h"

namespace d9::cli {
namespace {

constexpr char kHelp[] = R"(usage: d9 <command> [options] PATH...

Commands:
  summary PATH...       processes, threads, time span; sample counts, sample rate, CPU Hz,
                        drops; the top 5 allocation sites, CPU functions and live sites
  alloc PATH...         top allocation sites by Horvitz-Thompson estimated bytes and counts,
                        with 95% intervals
  leaks PATH...         sampled allocations still live at the end, grouped by stack, with
                        estimated bytes and ages
  cpu PATH...           top functions by self and total on-CPU samples
  peak PATH...          per process, the moment of the highest estimated live heap and the
                        sites holding it then, with 95% intervals
  lifetimes PATH...     per site, how long sampled allocations lived (log buckets) and the
                        share freed within --temporary; sorted by temporary churn
  flame PATH...         flame graph: an interactive SVG (-o FILE) or folded stacks (--folded)
  report PATH... -o F   one self-contained HTML page: summary, timelines (live heap by
                        site with its band, jemalloc's figures, allocation rate, CPU per
                        thread), a time window chosen by dragging (or #from=S&to=S) with
                        its flame graphs and sites, and the tables of the other commands
  export PATH...        pprof protobuf (--format pprof) or one JSON object per event (jsonl)
  diff A B              per-site change in estimated bytes and in CPU share from A to B
  run [opts] -- CMD...  run CMD with libd9.so preloaded, then say where the trace went and
                        summarise it; exits with CMD's status
  symbolize PATH...     add symbols to segments written without them (D9_SYMBOLIZE=0, or
                        .active files of a killed process), offline, from the recorded
                        module map and build-ids
  dump TARGET...        ask running profiled processes (pid, boot id or trace directory)
                        to seal their current segment now (live set, symbols) and print it
  ship DIR... s3://BUCKET[/PREFIX] [--watch]
                        upload sealed segments left on disk to S3 in dial9's key layout,
                        deleting each only once the server confirmed it (.active files of
                        processes that are gone are sealed first); --watch: keep watching
  ls s3://BUCKET[/PREFIX]
                        what a bucket holds: date range, services, hosts, processes (boot
                        ids), segments, bytes, the busiest minutes; --json
  fetch s3://BUCKET[/PREFIX] -o DIR [--decompress]
                        the selected segments as files DIR/{key} (.bin.gz, or raw .bin)

PATH is a segment file (.bin, .bin.gz, .bin.zst, .active; the format is told by its magic
bytes) or a directory searched recursively. Files are read one at a time; a damaged file
gets one line naming it and the byte offset, and what came before the damage still counts.
The exit status is 1 only when nothing was readable (2 for usage errors).

Selection (all analysis commands):
  --from T, --to T      time window: seconds from the start of the trace (12, 1.5s, 300ms,
                        2m, 1h), Unix time (@1714560000) or a date (2024-05-01T12:00:00,
                        local time unless it ends in Z or +HH:MM); wall clock comes from
                        ClockSyncEvent; leaks: the live allocations made in the window
  --tid N[,N...]        only these threads
  --pid N[,N...]        only these processes (process.pid, or the pid in the boot id)
  --process ID[,ID...]  only these boot ids (the directory names under D9_OUTPUT)

S3 (PATH may be s3://BUCKET[/PREFIX] wherever a path is taken; also ls and fetch):
  --service S, --host H only this service / host (D9_SERVICE, D9_HOST of the writer)
  --from T, --to T      as a date or Unix time: only the date/HHMM prefixes of the window
                        are listed (segments that started up to 60 s before --from too)
  --sample N            N segments spread evenly over what matched
  s3://B/P?host=H&from=T&to=T&service=S&process=ID&sample=N selects per path (d9 diff of
  two windows or hosts). Downloads run 4 at a time, cached by ETag under
  $XDG_CACHE_HOME/d9 (~/.cache/d9). Endpoint, region and credentials as for D9_S3_BUCKET.

Reports (summary, alloc, leaks, cpu, diff):
  --top N               rows to show (default 10; 5 in summary)
  --group G             function (the leaf function), stack (the whole stack, default for
                        alloc and leaks), or line (the leaf's file:line, falling back to the
                        function or address without line information); cpu defaults to
                        function
  --frames N            frames shown per stack (default 6; 4 in summary)
  --all-frames          memory sites: keep leaf frames of the allocation plumbing (std::,
                        __gnu_cxx::, operator new, malloc...); by default a site is named
                        by the first frame outside them
  --full-names          C++ names with template arguments and parameter lists (by default
                        they are shortened as pprof does: std::vector::push_back)
  --json                one JSON document instead of the table (full names and addresses)
  --by-thread           cpu: one table per thread
  --at T                leaks, flame --kind live: the live set at T (same forms as --from)
                        instead of at the end
  --sizes               alloc: a size histogram (powers of two) per site
  --temporary D         lifetimes: what counts as temporary (default 10ms)

flame:
  --kind K              cpu, alloc or live (default: cpu when there are CPU samples, else
                        alloc); alloc and live weigh stacks by estimated bytes
  -o FILE               write the SVG to FILE (default: stdout when it is not a terminal)
  --folded              print folded stacks ("root;...;leaf value") for flamegraph.pl,
                        inferno or speedscope instead
  --group line          label frames with file:line
  --by-thread           cpu: one tower per thread
  --full-names          unshortened C++ names
  --title TEXT, --width PX
                        In the SVG: click a frame to zoom, Escape or "Reset Zoom" to undo,
                        Ctrl-F or "Search" to highlight a regular expression; ?s=REGEX and
                        ?zoom=REGEX in the file URL do the same on opening

export:
  --format F            pprof (default) or jsonl
  --kind K              pprof sample types: alloc (alloc_objects, alloc_space), live
                        (inuse_objects, inuse_space), heap (all four) or cpu (samples, cpu
                        nanoseconds); default cpu when there are CPU samples and no
                        allocation samples, else alloc
  -o FILE               output file; pprof is gzipped (default: stdout when it is not a
                        terminal); jsonl defaults to stdout

run:
  --rate R              D9_SAMPLE_RATE: mean bytes between samples (K/M/G suffixes)
  --no-liveset          D9_LIVESET=0: do not track frees
  --cpu-hz H            D9_CPU_HZ: CPU samples per second per thread (0 = off)
  -o DIR                D9_OUTPUT (default: $D9_OUTPUT or ./d9-traces)
  --lib PATH            libd9.so to preload (default: beside d9, or ../lib when installed)
  -q, --quiet           print only where the trace went

symbolize:
  -o DIR                write STEM.bin[.zst|.gz] into DIR (directory inputs keep their
                        sub-directories); default: next to the input, never replacing a
                        file (an .active input gives STEM.bin)
  --in-place            replace each input (temporary file, then rename; an .active input
                        becomes STEM.bin)
  --debuginfod          let elfutils fetch missing debug info from $DEBUGINFOD_URLS
  -q, --quiet           symbolize: no line per file, only problems
  Each module's file is checked against its recorded build-id; a mismatch is refused. A
  segment without a module map (an .active file never sealed) uses the one of the newest
  sealed segment of the same process beside it. Compression follows the input.

dump:
  --all DIR             every live process with a directory under DIR (a D9_OUTPUT)
  --dir DIR             where to look for a pid's or boot id's directory when the process
                        has no segment open (default: $D9_OUTPUT, ./d9-traces, and the
                        process's own D9_OUTPUT)
  --timeout S           how long to wait for the processes to answer (default 10)
  The request is a file in the process's directory, which its writer thread looks for
  every 100 ms: no signal reaches the program, and it works for workers that dropped root.

Other options:
  --no-progress         no progress line (shown on a terminal for work over a second)
  -q, --quiet           no lines about damaged input (analysis commands)
  -h, --help            this text
  --version             the d9 version
)";

int usage_error(const std::string& msg) {
  fprintf(stderr, "d9: %s\nTry 'd9 --help'.\n", msg.c_str());
  return 2;
}

bool parse_size(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

void split_list(const std::string& s, std::vector<std::string>* out) {
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out->push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
}

struct Args {
  std::string command;
  std::vector<std::string> paths;
  ReportOptions report;
  bool group_set = false;
  bool top_set = false;
  bool frames_set = false;
  LoadOptions load;
  std::string kind, format, output, title;
  bool folded = false;
  bool full_names = false;
  int width = 1200;
  bool sizes = false;
  std::string at_text;  // --at as given
  TimeBound at;
  uint64_t temporary_ns = 10'000'000;
  ship::Selection s3;  // s3:// paths: which objects to fetch (ship/bucket.h)
};

// Parses the options of an analysis command (args after the command; "--opt=value" already
// split). Returns 0, or an exit status.
int parse_args(const std::vector<std::string>& args, Args* a) {
  const int argc = static_cast<int>(args.size());
  for (int i = 0; i < argc; ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = args[++i];
      return true;
    };
    std::string v;
    if (arg == "--") {
      for (++i; i < argc; ++i) a->paths.push_back(args[i]);
      break;
    }
    if (arg == "--top") {
      if (!value(&v) || !parse_size(v.c_str(), &a->report.top)) return usage_error("--top N");
      a->top_set = true;
    } else if (arg == "--frames") {
      size_t n;
      if (!value(&v) || !parse_size(v.c_str(), &n) || n == 0 || n > 1000) {
        return usage_error("--frames N (1-1000)");
      }
      a->report.frames = static_cast<int>(n);
      a->frames_set = true;
    } else if (arg == "--group") {
      if (!value(&v) || !parse_group(v, &a->report.group)) {
        return usage_error("--group function|stack|line");
      }
      a->group_set = true;
    } else if (arg == "--json") {
      a->report.json = true;
    } else if (arg == "--by-thread") {
      a->report.by_thread = true;
    } else if (arg == "--all-frames") {
      a->report.trim = false;
    } else if (arg == "--full-names") {
      a->full_names = true;
    } else if (arg == "--from" || arg == "--to") {
      std::string err;
      TimeBound& b = arg == "--from" ? a->load.filter.from : a->load.filter.to;
      if (!value(&v)) return usage_error(arg + " TIME");
      if (!parse_time(v, &b, &err)) return usage_error(err);
      // s3:// paths list only the minutes a wall-clock window touches.
      if (b.kind == TimeBound::kWall) {
        int64_t secs = b.wall_ns / 1000000000;
        (arg == "--from" ? a->s3.from_secs : a->s3.to_secs) = arg == "--from" ? secs : secs + 1;
      }
    } else if (arg == "--tid") {
      if (!value(&v)) return usage_error("--tid N[,N...]");
      std::vector<std::string> items;
      split_list(v, &items);
      for (const std::string& t : items) {
        size_t n;
        if (!parse_size(t.c_str(), &n) || n > UINT32_MAX) return usage_error("bad --tid " + t);
        a->load.filter.tids.push_back(static_cast<uint32_t>(n));
      }
    } else if (arg == "--pid") {
      if (!value(&v)) return usage_error("--pid N[,N...]");
      split_list(v, &a->load.filter.pids);
    } else if (arg == "--process") {
      if (!value(&v)) return usage_error("--process BOOT_ID[,BOOT_ID...]");
      split_list(v, &a->load.filter.processes);
      split_list(v, &a->s3.processes);
    } else if (arg == "--service") {
      if (!value(&a->s3.service)) return usage_error("--service NAME");
    } else if (arg == "--host") {
      if (!value(&a->s3.host)) return usage_error("--host NAME");
    } else if (arg == "--sample") {
      size_t n;
      if (!value(&v) || !parse_size(v.c_str(), &n) || n == 0) return usage_error("--sample N");
      a->s3.sample = n;
    } else if (arg == "--kind") {
      if (!value(&a->kind)) return usage_error("--kind KIND");
    } else if (arg == "--format") {
      if (!value(&a->format)) return usage_error("--format pprof|jsonl");
    } else if (arg == "-o" || arg == "--output") {
      if (!value(&a->output)) return usage_error("-o FILE");
    } else if (arg == "--folded") {
      a->folded = true;
    } else if (arg == "--title") {
      if (!value(&a->title)) return usage_error("--title TEXT");
    } else if (arg == "--width") {
      size_t n;
      if (!value(&v) || !parse_size(v.c_str(), &n) || n < 200 || n > 100000) {
        return usage_error("--width PX (200-100000)");
      }
      a->width = static_cast<int>(n);
    } else if (arg == "--at") {
      std::string err;
      if (!value(&a->at_text)) return usage_error("--at TIME");
      if (!parse_time(a->at_text, &a->at, &err)) return usage_error(err);
    } else if (arg == "--sizes") {
      a->sizes = true;
    } else if (arg == "--temporary") {
      TimeBound b;
      std::string err;
      if (!value(&v) || !parse_time(v, &b, &err) || b.kind != TimeBound::kRelative) {
        return usage_error("--temporary DURATION (10ms, 1s, ...)");
      }
      a->temporary_ns = static_cast<uint64_t>(std::llround(b.seconds * 1e9));
    } else if (arg == "--no-progress") {
      a->load.progress = false;
    } else if (arg == "-q" || arg == "--quiet") {
      a->load.quiet = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option " + arg + " for '" + a->command + "'");
    } else {
      a->paths.push_back(arg);
    }
  }
  return 0;
}

// Loads the inputs; returns 0 or an exit status (1 when nothing was readable). With
// `origin`, the trace's start is found first (what relative times count from).
int load(const std::vector<std::string>& paths, Profile* p, bool origin = false) {
  std::vector<std::string> missing;
  std::vector<std::string> files = collect_inputs(paths, &missing);
  if (files.empty()) {
    fprintf(stderr, "d9: no segments found in the given path(s)\n");
    return 1;
  }
  if (origin) p->find_origin(files);
  if (!p->load(files)) {
    fprintf(stderr, "d9: nothing readable in %zu file(s)\n", files.size());
    return 1;
  }
  if (p->skipped && p->processes.empty()) {
    fprintf(stderr, "d9: no segment matched --pid/--process\n");
  }
  return 0;
}

// Loads a.paths into a Profile made from a.load (with --full-names as asked); returns 0 or
// an exit status. With `tl`, the Timeline is told every event kept and finished (the views
// over time, cli/timeline.h, which need the live set too) and the trace's start is found first.
int load_profile(Args& a, Timeline* tl, std::optional<Profile>* p) {
  if (tl) {
    a.load.sink = tl;
    a.load.track_live = true;
  }
  p->emplace(a.load);
  (*p)->set_full_names(a.full_names);
  if (int rc = load(a.paths, &**p, tl != nullptr)) return rc;
  if (tl) tl->finish();
  return 0;
}

FILE* open_output(const std::string& path, bool binary_ok, const char* what) {
  if (path.empty() || path == "-") {
    if (path.empty() && !binary_ok && isatty(1)) {
      fprintf(stderr, "d9: refusing to write %s to a terminal; use -o FILE\n", what);
      return nullptr;
    }
    return stdout;
  }
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) fprintf(stderr, "d9: cannot write %s: %s\n", path.c_str(), strerror(errno));
  return f;
}

bool close_output(FILE* f, const std::string& path) {
  bool ok = f == stdout ? fflush(f) == 0 : fclose(f) == 0;
  if (!ok) fprintf(stderr, "d9: cannot write %s: %s\n", path.c_str(), strerror(errno));
  return ok;
}

int cmd_report(Args& a) {
  if (a.paths.empty()) return usage_error("'" + a.command + "' needs a PATH");
  const std::string& c = a.command;
  if (c == "summary" && !a.top_set) a.report.top = 5;
  if (c == "summary" && !a.frames_set) a.report.frames = 4;
  if (c == "cpu" && !a.group_set) a.report.group = Group::kFunction;
  a.load.track_live = c == "summary" || c == "leaks";
  // The views over time keep every sample in time order (cli/timeline.h).
  const bool at = c == "leaks" && a.at.kind != TimeBound::kNone;
  const bool over_time = c == "peak" || c == "lifetimes" || (c == "alloc" && a.sizes) || at;
  Timeline tl;
  std::optional<Profile> loaded;
  if (int rc = load_profile(a, over_time ? &tl : nullptr, &loaded)) return rc;
  Profile& p = *loaded;
  if (at) {
    apply_live_at(p, tl, a.at);
    a.report.at = a.at_text;
  }
  if (c == "summary") print_summary(stdout, p, a.report);
  if (c == "alloc")
    a.sizes ? print_sizes(stdout, p, tl, a.report) : print_alloc(stdout, p, a.report);
  if (c == "leaks") print_leaks(stdout, p, a.report);
  if (c == "peak") print_peak(stdout, p, tl, a.report);
  if (c == "lifetimes") print_lifetimes(stdout, p, tl, a.report, {a.temporary_ns});
  if (c == "cpu") print_cpu(stdout, p, a.report);
  return 0;
}

int cmd_flame(Args& a) {
  if (a.paths.empty()) return usage_error("'flame' needs a PATH");
  Kind kind = Kind::kCpu;
  if (!a.kind.empty() && !parse_kind(a.kind, &kind)) return usage_error("--kind cpu|alloc|live");
  a.load.track_live = a.kind.empty() || kind == Kind::kLive;
  const bool at = kind == Kind::kLive && a.at.kind != TimeBound::kNone;
  if (a.at.kind != TimeBound::kNone && !at) return usage_error("--at needs --kind live");
  Timeline tl;
  std::optional<Profile> loaded;
  if (int rc = load_profile(a, at ? &tl : nullptr, &loaded)) return rc;
  Profile& p = *loaded;
  if (at) apply_live_at(p, tl, a.at);
  if (a.kind.empty()) kind = p.cpu_total().samples ? Kind::kCpu : Kind::kAlloc;
  std::vector<Folded> stacks = folded_stacks(p, kind, a.report.group, a.report.by_thread);
  if (stacks.empty()) {
    fprintf(stderr, "d9: no %s samples to draw\n", kind_name(kind));
  }
  FILE* out = open_output(a.output, a.folded, "an SVG");
  if (!out) return 2;
  if (a.folded) {
    write_folded(out, stacks);
  } else {
    FlameOptions fo;
    fo.kind = kind;
    fo.width = a.width;
    switch (kind) {
      case Kind::kCpu:
        fo.title = "CPU flame graph (on-CPU samples)";
        break;
      case Kind::kAlloc:
        fo.title = "Allocation flame graph (estimated bytes allocated)";
        break;
      case Kind::kLive:
        fo.title = at ? "Live-set flame graph (estimated bytes live at " + a.at_text + ")"
                      : "Live-set flame graph (estimated bytes live at the end)";
        break;
    }
    if (!a.title.empty()) fo.title = a.title;
    std::string procs;
    for (const ProcessInfo& pr : p.processes) {
      if (procs.size() > 80) {
        procs += ", …";
        break;
      }
      if (!procs.empty()) procs += ", ";
      procs += pr.service.empty() ? pr.key : pr.service + " " + pr.key;
    }
    char sub[256];
    if (kind == Kind::kCpu) {
      snprintf(sub, sizeof(sub), "%llu sample(s); ",
               static_cast<unsigned long long>(p.cpu_total().samples));
    } else {
      const MemStat m =
          kind == Kind::kAlloc ? p.alloc_total() : static_cast<MemStat>(p.live_total());
      snprintf(sub, sizeof(sub), "%s from %llu sample(s); ", human_bytes(m.bytes).c_str(),
               static_cast<unsigned long long>(m.samples));
    }
    fo.subtitle = sub + procs;
    write_flame_svg(out, stacks, fo);
  }
  if (!close_output(out, a.output)) return 1;
  if (!a.output.empty() && a.output != "-") {
    fprintf(stderr, "d9: wrote %s (%s, %zu stacks)\n", a.output.c_str(), kind_name(kind),
            stacks.size());
  }
  return 0;
}

int cmd_html_report(Args& a) {
  if (a.paths.empty()) return usage_error("'report' needs a PATH");
  Timeline tl;
  std::optional<Profile> loaded;
  if (int rc = load_profile(a, &tl, &loaded)) return rc;
  Profile& p = *loaded;
  HtmlReportOptions o;
  o.temporary_ns = a.temporary_ns;
  if (!a.title.empty()) o.title = a.title;
  if (p.damaged) {
    o.damage = std::to_string(p.damaged) +
               " damaged input file(s): what came before the damage is shown (see d9's stderr)";
  }
  FILE* out = open_output(a.output, false, "HTML");
  if (!out) return 2;
  write_html_report(out, p, tl, o);
  if (!close_output(out, a.output)) return 1;
  if (!a.output.empty() && a.output != "-") fprintf(stderr, "d9: wrote %s\n", a.output.c_str());
  return 0;
}

int cmd_export(Args& a) {
  if (a.paths.empty()) return usage_error("'export' needs a PATH");
  std::string format = a.format.empty() ? "pprof" : a.format;
  if (format == "jsonl" || format == "json") {
    std::vector<std::string> files = collect_inputs(a.paths);
    if (files.empty()) {
      fprintf(stderr, "d9: no segments found in the given path(s)\n");
      return 1;
    }
    FILE* out = open_output(a.output, true, "JSON lines");
    if (!out) return 2;
    uint64_t readable = export_jsonl(files, a.load, out);
    if (!close_output(out, a.output)) return 1;
    if (readable == 0) {
      fprintf(stderr, "d9: nothing readable in %zu file(s)\n", files.size());
      return 1;
    }
    return 0;
  }
  if (format != "pprof") return usage_error("--format pprof|jsonl");
  PprofKind kind = PprofKind::kAlloc;
  if (!a.kind.empty() && !parse_pprof_kind(a.kind, &kind)) {
    return usage_error("--kind alloc|live|heap|cpu");
  }
  a.load.track_live = a.kind.empty() || kind == PprofKind::kLive || kind == PprofKind::kHeap;
  Profile p(a.load);
  if (int rc = load(a.paths, &p)) return rc;
  if (a.kind.empty() && p.cpu_total().samples && !p.alloc_total().samples) kind = PprofKind::kCpu;
  std::string data = gzip(build_pprof(p, kind));
  if (data.empty()) {
    fprintf(stderr, "d9: gzip failed\n");
    return 1;
  }
  if (a.output.empty() && isatty(1)) {
    fprintf(stderr, "d9: refusing to write pprof data to a terminal; use -o FILE\n");
    return 2;
  }
  if (!write_file(a.output.empty() ? "-" : a.output, data)) return 1;
  if (!a.output.empty() && a.output != "-") {
    fprintf(stderr, "d9: wrote %s (%zu bytes)\n", a.output.c_str(), data.size());
  }
  return 0;
}

int cmd_diff(Args& a) {
  if (a.paths.size() != 2) return usage_error("'diff' needs two paths: A B");
  if (!a.group_set) a.report.group = Group::kFunction;
  a.load.track_live = false;
  Profile pa(a.load), pb(a.load);
  pa.set_full_names(a.full_names);
  pb.set_full_names(a.full_names);
  if (int rc = load({a.paths[0]}, &pa)) return rc;
  if (int rc = load({a.paths[1]}, &pb)) return rc;
  print_diff(stdout, pa, pb, a.paths[0], a.paths[1], a.report);
  return 0;
}

int cmd_run(int argc, char** argv) {
  RunOptions o;
  int i = 2;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--rate") {
      if (!value(&o.rate)) return usage_error("--rate R");
    } else if (arg == "--no-liveset") {
      o.no_liveset = true;
    } else if (arg == "--cpu-hz") {
      if (!value(&o.cpu_hz)) return usage_error("--cpu-hz H");
    } else if (arg == "-o" || arg == "--output") {
      if (!value(&o.output)) return usage_error("-o DIR");
    } else if (arg == "--lib") {
      if (!value(&o.library)) return usage_error("--lib PATH");
    } else if (arg == "-q" || arg == "--quiet") {
      o.quiet = true;
    } else if (arg[0] == '-') {
      return usage_error("unknown option " + arg + " for 'run' (put the command after --)");
    } else {
      break;  // the command starts here
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) return usage_error("usage: d9 run [options] -- CMD [ARGS...]");
  return run_profiled(o);
}

int cmd_symbolize(int argc, char** argv) {
  SymbolizeOptions o;
  std::vector<std::string> paths;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      paths.insert(paths.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg == "-h" || arg == "--help") {
      fputs(kHelp, stdout);
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      if (i + 1 >= argc) return usage_error("-o DIR");
      o.out_dir = argv[++i];
    } else if (arg.rfind("--output=", 0) == 0) {
      o.out_dir = arg.substr(9);
    } else if (arg == "--in-place") {
      o.in_place = true;
    } else if (arg == "--debuginfod") {
      o.debuginfod = true;
    } else if (arg == "-q" || arg == "--quiet") {
      o.quiet = true;
    } else if (arg == "--no-progress") {
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option " + arg + " for 'symbolize'");
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) return usage_error("'symbolize' needs a PATH");
  if (o.in_place && !o.out_dir.empty()) return usage_error("-o and --in-place exclude each other");
  return symbolize_files(paths, o, stdout);
}

int cmd_dump(int argc, char** argv) {
  DumpOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (arg == "-h" || arg == "--help") {
      fputs(kHelp, stdout);
      return 0;
    } else if (arg == "--all") {
      const char* v = value();
      if (!v) return usage_error("--all DIR");
      o.all_dir = v;
    } else if (arg == "--dir") {
      const char* v = value();
      if (!v) return usage_error("--dir DIR");
      o.search_dir = v;
    } else if (arg == "--timeout") {
      const char* v = value();
      char* end = nullptr;
      double secs = v ? strtod(v, &end) : -1;
      if (!v || *end || secs <= 0 || secs > 3600) return usage_error("--timeout SECONDS");
      o.timeout_ms = static_cast<int>(secs * 1000);
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option " + arg + " for 'dump'");
    } else {
      o.targets.push_back(arg);
    }
  }
  if (o.targets.empty() && o.all_dir.empty())
    return usage_error("'dump' needs a TARGET or --all DIR");
  return dump_processes(o, stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fputs(kHelp, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    fputs(kHelp, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    printf("d9 %s\n", D9_VERSION);
    return 0;
  }
  if (cmd == "run") return cmd_run(argc, argv);
  if (cmd == "symbolize") return cmd_symbolize(argc, argv);
  if (cmd == "dump") return cmd_dump(argc, argv);
  if (cmd == "ship") return ship::cmd_ship(argc, argv);
  if (cmd == "ls") return ship::cmd_ls(argc, argv);
  if (cmd == "fetch") return ship::cmd_fetch(argc, argv);
  Args a;
  a.command = cmd;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      fputs(kHelp, stdout);
      return 0;
    }
  }
  const bool known = cmd == "summary" || cmd == "alloc" || cmd == "leaks" || cmd == "cpu" ||
                     cmd == "flame" || cmd == "export" || cmd == "diff" || cmd == "peak" ||
                     cmd == "lifetimes" || cmd == "report";
  if (!known) return usage_error("unknown command '" + cmd + "'");
  std::vector<std::string> args;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (arg == "--") {
      args.insert(args.end(), argv + i, argv + argc);
      break;
    }
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      args.push_back(arg.substr(0, eq));
      args.push_back(arg.substr(eq + 1));
    } else {
      args.push_back(arg);
    }
  }
  if (int rc = parse_args(args, &a)) return rc;
  ship::use_for_s3_paths(a.s3);
  if (cmd == "flame") return cmd_flame(a);
  if (cmd == "export") return cmd_export(a);
  if (cmd == "report") return cmd_html_report(a);
  if (cmd == "diff") return cmd_diff(a);
  return cmd_report(a);
}

}  // namespace d9::cli

int main(int argc, char** argv) {
  return d9::cli::main(argc, argv);
}
