// `d9 report -o report.html`: one self-contained HTML page (script, style and data inline,
// no network, opens from file://) with the summary, timelines over the whole trace, a time
// window chosen by dragging (or #from=S&to=S in the URL) that recomputes the flame graphs
// and tables below it, and the whole-trace tables of the other commands.
//
// Why hand-drawn SVG in inline JavaScript and no charting library: the page needs four
// small charts, a drag selection and flame graphs; that is a few hundred lines, has no
// build step or npm dependency to keep current, and draws exactly what the CLI computes.
//
// Size stays bounded whatever the trace: the series are cut into at most `bins` bins,
// per-stack series are kept for the `top_stacks` heaviest stacks only (the rest is summed
// as "other"), tables hold `top_rows` rows. Numbers the page shows for the whole trace
// (summary, peaks) are the same computations as `d9 summary --json` and `d9 peak --json`,
// carried in data-* attributes so tests can read them from the DOM.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "cli/profile.h"
#include "cli/timeline.h"

namespace d9::cli {

struct HtmlReportOptions {
  size_t bins = 600;
  size_t top_stacks = 300;
  size_t top_rows = 50;
  uint64_t temporary_ns = 10'000'000;
  std::string title = "d9 report";
  std::string damage;  // lines about damaged inputs, shown as warnings
};

// The page's data as one JSON document (what write_html_report embeds).
std::string html_report_data(Profile& p, const Timeline& tl, const HtmlReportOptions& o);
void write_html_report(FILE* out, Profile& p, const Timeline& tl, const HtmlReportOptions& o);

}  // namespace d9::cli
