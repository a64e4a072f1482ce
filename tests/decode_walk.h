// Test helper for the decoder's unit tests and fuzz target: a Visitor that reads every value of
// every event, list, map and string-map elements included, so sanitizers see each access.
#pragma once

#include <cstdint>

#include "writer/wire_decoder.h"

namespace d9::test {

struct WalkAll : decode::Visitor {
  uint64_t events = 0;
  uint64_t checksum = 0;     // folds in everything read, so no read can be optimised away
  uint64_t short_lists = 0;  // lists and maps that iterated fewer elements than their count

  void Walk(const decode::Value& v) {
    using decode::ValueKind;
    checksum += static_cast<uint64_t>(v.kind) + v.bits + v.size;
    uint32_t n = 0;
    switch (v.kind) {
      case ValueKind::kString:
      case ValueKind::kBytes:
        for (char c : v.str()) checksum += static_cast<uint8_t>(c);
        return;
      case ValueKind::kStack:
        for (uint64_t f : v.stack()) checksum += f;
        return;
      case ValueKind::kStringMap:
        for (auto [k, val] : v.string_map()) checksum += k.size() + val.size();
        return;
      case ValueKind::kList:
        for (const decode::Value& e : v.list()) {
          Walk(e);
          ++n;
        }
        break;
      case ValueKind::kMap:
        for (const auto& [k, val] : v.map()) {
          Walk(k);
          Walk(val);
          ++n;
        }
        break;
      default:
        return;
    }
    if (n != v.count) ++short_lists;
  }

  bool OnEvent(const decode::Event& e) override {
    ++events;
    checksum += e.timestamp + e.name().size();
    for (const decode::Value& v : e.values) Walk(v);
    return true;
  }
};

}  // namespace d9::test
