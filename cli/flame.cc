#include "cli/flame.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

namespace d9::cli {

namespace {

std::string clean_frame(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == ';') c = ',';
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string xml(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

struct Node {
  std::string name;
  double value = 0;
  std::map<std::string, std::unique_ptr<Node>> children;
};

uint32_t fnv(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// flamegraph.pl-like palettes: warm for CPU, green for allocations, blue for the live set.
std::string color(Kind kind, const std::string& name) {
  uint32_t h = fnv(name);
  double v1 = static_cast<double>(h & 0xFF) / 255.0;
  double v2 = static_cast<double>((h >> 8) & 0xFF) / 255.0;
  double v3 = static_cast<double>((h >> 16) & 0xFF) / 255.0;
  int r, g, b;
  switch (kind) {
    case Kind::kAlloc:
      r = static_cast<int>(50 + 60 * v3);
      g = static_cast<int>(160 + 70 * v1);
      b = static_cast<int>(50 + 60 * v2);
      break;
    case Kind::kLive:
      r = static_cast<int>(70 + 60 * v3);
      g = static_cast<int>(130 + 60 * v2);
      b = static_cast<int>(200 + 55 * v1);
      break;
    case Kind::kCpu:
    default:
      r = static_cast<int>(205 + 50 * v3);
      g = static_cast<int>(230 * v1);
      b = static_cast<int>(55 * v2);
      break;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "rgb(%d,%d,%d)", r, g, b);
  return buf;
}

std::string format_value(Kind kind, double v, double total) {
  char buf[96];
  double share = total > 0 ? 100 * v / total : 0;
  if (kind == Kind::kCpu) {
    snprintf(buf, sizeof(buf), "%.0f samples, %.2f%%", v, share);
  } else {
    snprintf(buf, sizeof(buf), "%s, %.2f%%", human_bytes(v).c_str(), share);
  }
  return buf;
}

constexpr int kFrameHeight = 16;
constexpr int kFontSize = 12;
constexpr int kPad = 10;
constexpr int kTop = 56;
constexpr int kBottom = 34;
constexpr double kCharWidth = 0.59 * kFontSize;

std::string fit_text(const std::string& name, double width) {
  int chars = static_cast<int>((width - 6) / kCharWidth);
  if (chars < 3) return "";
  if (static_cast<int>(name.size()) <= chars) return name;
  return name.substr(0, static_cast<size_t>(chars - 2)) + "..";
}

struct Emit {
  FILE* out;
  Kind kind;
  double total;
  double scale;  // px per unit
  double min_value;
  int height;  // svg height
  int depth_max;
};

void emit(const Emit& e, const Node& n, double x, int depth) {
  double w = n.value;
  double px = kPad + x * e.scale, pw = w * e.scale;
  int y = e.height - kBottom - (depth + 1) * kFrameHeight;
  std::string name = xml(n.name);
  fprintf(e.out,
          "<g data-n=\"%s\" data-x=\"%.10f\" data-w=\"%.10f\" data-d=\"%d\"><title>%s (%s)</title>"
          "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" rx=\"2\"/>"
          "<text x=\"%.2f\" y=\"%d\">%s</text></g>\n",
          name.c_str(), e.total > 0 ? x / e.total : 0, e.total > 0 ? w / e.total : 0, depth,
          name.c_str(), format_value(e.kind, w, e.total).c_str(), px, y, std::max(pw - 0.5, 0.0),
          kFrameHeight - 1, depth == 0 ? "rgb(200,200,200)" : color(e.kind, n.name).c_str(), px + 3,
          y + kFrameHeight - 4, xml(fit_text(n.name, pw)).c_str());
  double cx = x;
  for (const auto& [k, c] : n.children) {
    if (c->value >= e.min_value) emit(e, *c, cx, depth + 1);
    cx += c->value;
  }
}

int max_depth(const Node& n, double min_value) {
  int d = 0;
  for (const auto& [k, c] : n.children) {
    if (c->value >= min_value) d = std::max(d, 1 + max_depth(*c, min_value));
  }
  return d;
}

const char kScript[] = R"JS(
"use strict";
var W = %WIDTH%, PAD = %PAD%, CW = %CW%;
var frames = [], details, matched, unzoom, searchbtn, searching = null;
var view = {x: 0, w: 1, d: 0};
function num(g, k) { return parseFloat(g.getAttribute("data-" + k)); }
function fit(t, name, pw) {
  var chars = Math.floor((pw - 6) / CW);
  t.textContent = chars < 3 ? "" : (name.length <= chars ? name : name.slice(0, chars - 2) + "..");
}
function layout() {
  var scale = (W - 2 * PAD) / view.w, eps = 1e-9;
  frames.forEach(function (g) {
    var x = num(g, "x"), w = num(g, "w"), d = num(g, "d");
    var r = g.querySelector("rect"), t = g.querySelector("text");
    var ancestor = d < view.d && x <= view.x + eps && x + w >= view.x + view.w - eps;
    var inside = d >= view.d && x >= view.x - eps && x + w <= view.x + view.w + eps;
    if (!ancestor && !inside) { g.style.display = "none"; return; }
    g.style.display = "";
    var px = ancestor ? PAD : PAD + (x - view.x) * scale;
    var pw = ancestor ? W - 2 * PAD : w * scale;
    if (ancestor) g.classList.add("parent"); else g.classList.remove("parent");
    r.setAttribute("x", px.toFixed(2));
    r.setAttribute("width", Math.max(pw - 0.5, 0).toFixed(2));
    t.setAttribute("x", (px + 3).toFixed(2));
    fit(t, g.getAttribute("data-n"), pw);
  });
}
function zoom(g) {
  view = {x: num(g, "x"), w: num(g, "w"), d: num(g, "d")};
  unzoom.style.opacity = view.d > 0 ? "1" : "0";
  layout();
}
function resetZoom() { view = {x: 0, w: 1, d: 0}; unzoom.style.opacity = "0"; layout(); }
function doSearch(term) {
  var re;
  try { re = new RegExp(term); } catch (e) { alert("not a regular expression: " + term); return; }
  searching = term;
  var ranges = [];
  frames.forEach(function (g) {
    if (re.test(g.getAttribute("data-n")) && num(g, "d") > 0) {
      g.classList.add("hit");
      ranges.push([num(g, "x"), num(g, "x") + num(g, "w")]);
    } else {
      g.classList.remove("hit");
    }
  });
  ranges.sort(function (a, b) { return a[0] - b[0]; });
  var sum = 0, end = -1;
  ranges.forEach(function (r) {
    if (r[0] >= end) { sum += r[1] - r[0]; end = r[1]; }
    else if (r[1] > end) { sum += r[1] - end; end = r[1]; }
  });
  matched.textContent = "Matched: " + (100 * sum).toFixed(2) + "% (" + term + ")";
  searchbtn.textContent = "Reset Search";
}
function clearSearch() {
  searching = null;
  frames.forEach(function (g) { g.classList.remove("hit"); });
  matched.textContent = "";
  searchbtn.textContent = "Search";
}
function askSearch() {
  var term = prompt("Highlight frames matching (regular expression):", searching || "");
  if (term) doSearch(term);
}
function init() {
  frames = Array.prototype.slice.call(document.querySelectorAll("#frames > g"));
  details = document.getElementById("details");
  matched = document.getElementById("matched");
  unzoom = document.getElementById("unzoom");
  searchbtn = document.getElementById("search");
  frames.forEach(function (g) {
    var title = g.querySelector("title").textContent;
    g.addEventListener("click", function (e) { zoom(g); e.stopPropagation(); });
    g.addEventListener("mouseover", function () { details.textContent = title; });
    g.addEventListener("mouseout", function () { details.textContent = " "; });
  });
  unzoom.addEventListener("click", resetZoom);
  searchbtn.addEventListener("click", function () { if (searching) clearSearch(); else askSearch(); });
  window.addEventListener("keydown", function (e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); askSearch(); }
    else if (e.key === "Escape") { resetZoom(); clearSearch(); }
  });
  // ?s=REGEX highlights, ?zoom=REGEX zooms to the widest matching frame (for links and tests).
  var q = null, z = null;
  try {
    var params = new URLSearchParams(window.location.search);
    q = params.get("s");
    z = params.get("zoom");
  } catch (e) {}
  if (q) doSearch(q);
  if (z) {
    var re = new RegExp(z), best = null;
    frames.forEach(function (g) {
      if (re.test(g.getAttribute("data-n")) && (!best || num(g, "w") > num(best, "w"))) best = g;
    });
    if (best) zoom(best);
  }
}
)JS";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

}  // namespace

bool parse_kind(const std::string& s, Kind* out) {
  if (s == "alloc") {
    *out = Kind::kAlloc;
  } else if (s == "live" || s == "inuse" || s == "leaks") {
    *out = Kind::kLive;
  } else if (s == "cpu") {
    *out = Kind::kCpu;
  } else {
    return false;
  }
  return true;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAlloc:
      return "alloc";
    case Kind::kLive:
      return "live";
    case Kind::kCpu:
      break;
  }
  return "cpu";
}

std::vector<std::string> flame_frames(Profile& p, uint32_t stack, Group labels) {
  if (labels == Group::kStack) labels = Group::kFunction;
  std::vector<std::string> parts;
  for (uint32_t f : p.stack(stack)) {
    for (uint32_t l : p.labels(f, labels)) parts.push_back(clean_frame(p.label(l)));
  }
  if (parts.empty()) parts.push_back("(no stack)");
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<Folded> folded_stacks(Profile& p, Kind kind, Group labels, bool by_thread) {
  if (labels == Group::kStack) labels = Group::kFunction;
  std::map<std::string, double> acc;
  auto stack_text = [&](uint32_t s) {
    std::string out;
    for (const std::string& f : flame_frames(p, s, labels)) {
      if (!out.empty()) out += ';';
      out += f;
    }
    return out;
  };
  if (kind == Kind::kCpu && by_thread) {
    for (const auto& [key, st] : p.cpu_by_thread()) {
      const ThreadInfo& t = p.threads[key >> 32];
      std::string root = "thread " + std::to_string(t.tid);
      if (!t.name.empty()) root += " (" + clean_frame(t.name) + ")";
      acc[root + ";" + stack_text(static_cast<uint32_t>(key & 0xFFFFFFFF))] +=
          static_cast<double>(st.samples);
    }
  } else {
    for (uint32_t s = 0; s < p.stack_count(); ++s) {
      double v = kind == Kind::kCpu    ? static_cast<double>(p.cpu()[s].samples)
                 : kind == Kind::kLive ? p.live()[s].bytes
                                       : p.alloc()[s].bytes;
      if (v > 0) acc[stack_text(s)] += v;
    }
  }
  std::vector<Folded> out;
  out.reserve(acc.size());
  for (auto& [k, v] : acc) out.push_back({k, v});
  return out;
}

void write_folded(FILE* out, const std::vector<Folded>& stacks) {
  for (const Folded& f : stacks) {
    long long v = std::llround(f.value);
    if (v > 0) fprintf(out, "%s %lld\n", f.stack.c_str(), v);
  }
}

void write_flame_svg(FILE* out, const std::vector<Folded>& stacks, const FlameOptions& o) {
  Node root;
  root.name = "all";
  for (const Folded& f : stacks) {
    if (f.value <= 0) continue;
    root.value += f.value;
    Node* n = &root;
    size_t start = 0;
    while (start <= f.stack.size()) {
      size_t end = f.stack.find(';', start);
      if (end == std::string::npos) end = f.stack.size();
      std::string part = f.stack.substr(start, end - start);
      std::unique_ptr<Node>& c = n->children[part];
      if (!c) {
        c = std::make_unique<Node>();
        c->name = part;
      }
      c->value += f.value;
      n = c.get();
      start = end + 1;
    }
  }
  const int width = std::max(o.width, 200);
  const double scale = root.value > 0 ? (width - 2 * kPad) / root.value : 0;
  const double min_value = scale > 0 ? o.min_width_px / scale : 0;
  const int depth = max_depth(root, min_value);
  const int height = kTop + kBottom + (depth + 1) * kFrameHeight;

  fprintf(out,
          "<?xml version=\"1.0\" standalone=\"no\"?>\n"
          "<svg version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "onload=\"init()\" xmlns=\"http://www.w3.org/2000/svg\">\n",
          width, height, width, height);
  fprintf(out,
          "<style type=\"text/css\">\n"
          "text { font-family: Verdana, sans-serif; font-size: %dpx; fill: rgb(0,0,0); }\n"
          "#frames text { pointer-events: none; }\n"
          "#frames g { cursor: pointer; }\n"
          "#frames g:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }\n"
          ".hit rect { fill: rgb(230,0,230); }\n"
          ".parent { opacity: 0.5; }\n"
          ".button { cursor: pointer; fill: rgb(0,0,160); text-decoration: underline; }\n"
          ".title { font-size: 17px; text-anchor: middle; }\n"
          ".subtitle { font-size: 12px; text-anchor: middle; fill: rgb(90,90,90); }\n"
          "</style>\n",
          kFontSize);
  std::string script = kScript;
  script = replace_all(script, "%WIDTH%", std::to_string(width));
  script = replace_all(script, "%PAD%", std::to_string(kPad));
  char cw[32];
  snprintf(cw, sizeof(cw), "%.3f", kCharWidth);
  script = replace_all(script, "%CW%", cw);
  fprintf(out, "<script type=\"text/ecmascript\"><![CDATA[%s]]></script>\n", script.c_str());
  fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"rgb(250,250,245)\"/>\n",
          width, height);
  fprintf(out, "<text class=\"title\" x=\"%d\" y=\"22\">%s</text>\n", width / 2,
          xml(o.title).c_str());
  fprintf(out, "<text class=\"subtitle\" x=\"%d\" y=\"40\">%s</text>\n", width / 2,
          xml(o.subtitle).c_str());
  fprintf(out,
          "<text id=\"unzoom\" class=\"button\" x=\"%d\" y=\"22\" style=\"opacity:0\">Reset "
          "Zoom</text>\n",
          kPad);
  fprintf(out,
          "<text id=\"search\" class=\"button\" x=\"%d\" y=\"22\" "
          "style=\"text-anchor:end\">Search</text>\n",
          width - kPad);
  fprintf(out, "<text id=\"details\" x=\"%d\" y=\"%d\"> </text>\n", kPad, height - 12);
  fprintf(out, "<text id=\"matched\" x=\"%d\" y=\"%d\" style=\"text-anchor:end\"></text>\n",
          width - kPad, height - 12);
  fprintf(out, "<g id=\"frames\">\n");
  if (root.value > 0) {
    Emit e{out, o.kind, root.value, scale, min_value, height, depth};
    emit(e, root, 0, 0);
  } else {
    fprintf(out, "<text x=\"%d\" y=\"%d\" style=\"text-anchor:middle\">no samples</text>\n",
            width / 2, kTop + 10);
  }
  fprintf(out, "</g>\n</svg>\n");
}

}  // namespace d9::cli
