// Messages to stderr, prefixed "d9:", written with one write() and no allocation, so they
// are safe to emit from inside malloc.
#pragma once

#include <cstdint>

namespace d9::log {

// Writes "d9: " + parts + "\n" as one line (truncated at 1 KiB).
void write_line(const char* const* parts, int count);

template <class... Parts>
void line(const Parts*... parts) {
  const char* list[] = {parts...};
  write_line(list, static_cast<int>(sizeof...(parts)));
}

// Decimal text of `v` in `buf` (at least 21 bytes); returns buf.
const char* u64(uint64_t v, char* buf);

}  // namespace d9::log
