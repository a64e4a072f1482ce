// Function names for display: shortened as pprof does, and the allocation plumbing.
#pragma once

#include <string>
#include <string_view>

namespace d9::cli {

// C++ (and Rust) names shortened for display, as pprof does: template arguments and the
// parameter list go, "(anonymous namespace)", operators and {lambda…} stay.
// "std::vector<int>::push_back(int const&)" -> "std::vector::push_back".
std::string simplify_name(std::string_view name);
// Allocation plumbing: the standard library and the allocator entry points.
bool is_alloc_plumbing(std::string_view simplified_name);

}  // namespace d9::cli
