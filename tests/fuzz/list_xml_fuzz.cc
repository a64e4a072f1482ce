// libFuzzer target: arbitrary bytes as a ListObjectsV2 answer (ship/layout.cc), and every key
// it yields through the segment-key parser. Besides "no crash", a listing that parses keeps
// its promises: a truncated one has a continuation token.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ship/client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string xml(reinterpret_cast<const char*>(data), size);
  d9::ship::Listing listing;
  std::string error;
  if (d9::ship::parse_list_xml(xml, &listing, &error)) {
    if (listing.truncated && listing.next_token.empty()) std::abort();
    for (const auto& o : listing.objects) {
      d9::ship::SegmentInfo info;
      if (d9::ship::parse_segment_key("", o.key, &info) && info.service.empty()) std::abort();
    }
  } else if (error.empty()) {
    std::abort();
  }
  return 0;
}
