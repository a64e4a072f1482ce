// Display labels of frames and the keys stacks group under (function, line or whole stack),
// interned once per Profile.
#include "cli/profile.h"

namespace d9::cli {

namespace {

std::string basename_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool parse_group(const std::string& s, Group* out) {
  if (s == "function" || s == "func" || s == "fn") {
    *out = Group::kFunction;
  } else if (s == "stack") {
    *out = Group::kStack;
  } else if (s == "line") {
    *out = Group::kLine;
  } else {
    return false;
  }
  return true;
}

uint32_t Profile::intern_label(const std::string& s) {
  auto [it, inserted] = label_ids_.try_emplace(s, static_cast<uint32_t>(label_strings_.size()));
  if (inserted) label_strings_.push_back(s);
  return it->second;
}

const std::vector<uint32_t>& Profile::labels(uint32_t frame, Group g) {
  auto& cache = g == Group::kLine ? line_labels_ : fn_labels_;
  if (cache.size() < frames_.size()) cache.resize(frames_.size());
  std::vector<uint32_t>& out = cache[frame];
  if (!out.empty()) return out;
  if (const std::vector<Symbol>* syms = symbols(frame)) {
    for (auto it = syms->rbegin(); it != syms->rend(); ++it) {
      // The writer names what it could not resolve "[unknown] 0x…": the module and file
      // offset below say more.
      if (it->name.empty() || it->name.starts_with("[unknown]")) continue;
      std::string name = full_names_ ? it->name : simplify_name(it->name);
      if (g == Group::kLine && !it->file.empty()) {
        name += " " + basename_of(it->file);
        if (it->line) name += ":" + std::to_string(it->line);
      }
      out.push_back(intern_label(name));
    }
  }
  if (out.empty()) {
    // No symbol: "libfoo.so+0x1234" (file address) when the module map knows the address.
    const Frame& f = frames_[frame];
    if (const Module* m = module(f.process, f.addr)) {
      out.push_back(intern_label(basename_of(m->path) + "+" + hex(f.addr - m->bias)));
    } else {
      out.push_back(intern_label(hex(f.addr)));
    }
  }
  return out;
}

std::vector<uint32_t> Profile::group_key(uint32_t stack_id, Group g, bool trim) {
  std::span<const uint32_t> frames = stack(stack_id);
  if (frames.empty()) return {intern_label("(no stack)")};
  std::vector<uint32_t> fn;
  for (uint32_t f : frames) {
    const std::vector<uint32_t>& l = labels(f, Group::kFunction);
    fn.insert(fn.end(), l.begin(), l.end());
  }
  size_t start = 0;
  if (trim) {
    auto plumbing = [&](uint32_t label) {
      if (plumbing_.size() <= label) plumbing_.resize(label_strings_.size(), -1);
      int8_t& p = plumbing_[label];
      if (p < 0) p = is_alloc_plumbing(simplify_name(label_strings_[label])) ? 1 : 0;
      return p == 1;
    };
    while (start + 1 < fn.size() && plumbing(fn[start])) ++start;
  }
  if (g == Group::kFunction) return {fn[start]};
  if (g == Group::kLine) {
    // Line labels come one per function label, in the same order.
    size_t i = 0;
    for (uint32_t f : frames) {
      for (uint32_t l : labels(f, Group::kLine)) {
        if (i++ == start) return {l};
      }
    }
    return {fn[start]};
  }
  return std::vector<uint32_t>(fn.begin() + static_cast<std::ptrdiff_t>(start), fn.end());
}

}  // namespace d9::cli
