// Formatting shared by the reports: bytes, addresses, wall-clock instants, JSON strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace d9::cli {

std::string human_bytes(double bytes);
std::string hex(uint64_t v);
// "2024-05-01 12:00:00.123 +0200" (local time), or "+12.345 s" for monotonic stamps.
std::string format_wall(int64_t ns);
std::string json_escape(std::string_view s);

}  // namespace d9::cli
