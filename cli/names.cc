// Function names for display: C++ and Rust names shortened as pprof does, and the
// allocation plumbing a site is named past (cli/names.h).
#include "cli/names.h"

#include <cxxabi.h>

#include <cstdlib>

namespace d9::cli {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

// Index just past the bracket matching s[i] (one of "<({["), or s.size().
size_t skip_balanced(std::string_view s, size_t i) {
  const char open = s[i];
  const char close = open == '<' ? '>' : open == '(' ? ')' : open == '{' ? '}' : ']';
  int depth = 0;
  for (; i < s.size(); ++i) {
    if (s[i] == open) ++depth;
    if (s[i] == close && --depth == 0) return i + 1;
  }
  return s.size();
}

}  // namespace

std::string simplify_name(std::string_view s) {
  static constexpr std::string_view kAnon = "(anonymous namespace)";
  // jemalloc inside libd9.so (CPU profiles): its entry points carry d9's prefix
  // ("d9_je_malloc", and its C++ operators still mangled: "d9_je__Znwm") and its internals
  // a second "je_" ("je_je_sdallocx_noflags"). Shown as jemalloc itself names them.
  std::string demangled;
  if (s.starts_with("d9_je_")) {
    s.remove_prefix(6);
    int status = 0;
    char* d = s.starts_with("_Z")
                  ? abi::__cxa_demangle(std::string(s).c_str(), nullptr, nullptr, &status)
                  : nullptr;
    if (d != nullptr && status == 0) s = demangled = d;
    free(d);
  } else if (s.starts_with("je_je_")) {
    s.remove_prefix(3);
  }
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '<') {
      if (ends_with(out, "operator") || ends_with(out, "operator<") ||
          ends_with(out, "operator<<")) {
        out += c;
        ++i;
      } else if (out.empty()) {
        // A Rust qualified path, "<T as Trait>::f": kept whole.
        size_t end = skip_balanced(s, i);
        out.append(s.substr(i, end - i));
        i = end;
      } else {
        i = skip_balanced(s, i);
      }
      continue;
    }
    if (c == '(') {
      if (s.substr(i, kAnon.size()) == kAnon) {
        out += kAnon;
        i += kAnon.size();
        continue;
      }
      if (ends_with(out, "decltype") || ends_with(out, "decltype ")) {
        // Part of a return type: "decltype (…) std::construct_at<…>(…)".
        size_t end = skip_balanced(s, i);
        out.append(s.substr(i, end - i));
        i = end;
        continue;
      }
      if (ends_with(out, "operator") && s.substr(i, 2) == "()") {
        out += "()";
        i += 2;
        continue;
      }
      // The parameter list. A local entity ("f(int)::inner") goes on after it.
      i = skip_balanced(s, i);
      if (s.substr(i, 2) == "::") continue;
      break;
    }
    if (c == '{') {
      size_t end = skip_balanced(s, i);
      out.append(s.substr(i, end - i));
      i = end;
      continue;
    }
    out += c;
    ++i;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  // A function template's return type comes first: "void std::vector::_M_realloc_insert".
  // Drop everything up to the last top-level space (spaces after "operator" are its name's).
  const size_t op = out.rfind("operator");
  const size_t limit = op == std::string::npos ? out.size() : op;
  size_t last_space = std::string::npos;
  int depth = 0;
  for (size_t k = 0; k < limit; ++k) {
    if (out[k] == '(' || out[k] == '{' || out[k] == '[' || out[k] == '<') ++depth;
    if (out[k] == ')' || out[k] == '}' || out[k] == ']' || out[k] == '>') --depth;
    if (out[k] == ' ' && depth == 0) last_space = k;
  }
  if (last_space != std::string::npos && last_space + 1 < out.size()) {
    out.erase(0, last_space + 1);
  }
  return out.empty() ? std::string(s) : out;
}

bool is_alloc_plumbing(std::string_view n) {
  for (std::string_view prefix : {"std::", "__gnu_cxx::", "__cxxabiv1::", "__cxa_"}) {
    if (n.substr(0, prefix.size()) == prefix) return true;
  }
  for (std::string_view f : {"operator new", "operator new[]", "malloc", "calloc", "realloc",
                             "reallocarray", "aligned_alloc", "posix_memalign", "memalign",
                             "valloc", "pvalloc", "mallocx", "rallocx", "strdup", "strndup"}) {
    if (n == f) return true;
  }
  return false;
}

}  // namespace d9::cli
