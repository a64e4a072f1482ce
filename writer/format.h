// dial9 trace format, version 1: the constants both the encoder and the decoder use.
// The wire format is specified in shared/design/dial9-format.md; this header is the
// only place in d9 that spells out tags and type codes.
#pragma once

#include <cstdint>

namespace d9::fmt {

// Stream header: "TRC\0" then the version byte. A file may hold several streams back
// to back; each header resets schemas, pools and the timestamp base.
inline constexpr uint8_t kMagic[4] = {'T', 'R', 'C', 0};
inline constexpr uint8_t kVersion = 1;
inline constexpr int kHeaderSize = 5;

enum class Frame : uint8_t {
  kSchema = 0x01,
  kEvent = 0x02,
  kStringPool = 0x03,
  kStackPool = 0x04,
  kTimestampReset = 0x05,
  kSchemaAnnotations = 0x06,  // read, never written (old dial9 decoders reject it)
};

enum class FieldType : uint8_t {
  kI64 = 1,
  kF64 = 2,
  kBool = 3,
  kString = 4,
  kBytes = 5,
  kPooledStack = 6,
  kPooledString = 7,
  kStackFrames = 8,
  kVarint = 9,
  kStringMap = 10,
  kU8 = 11,
  kU16 = 12,
  kU32 = 13,
  kDynamicList = 14,
  kDynamicMap = 15,
};

// `tag | kOptional`: each value is prefixed by 0 (absent) or 1 (present).
inline constexpr uint8_t kOptional = 0x80;

// Largest timestamp delta an event header (u24) can carry; beyond it a reset frame is sent.
inline constexpr uint64_t kMaxTimestampDelta = 0xFFFFFF;

// Event names (readers identify events by schema name, never by id).
inline constexpr char kClockSyncEvent[] = "ClockSyncEvent";
inline constexpr char kSegmentMetadataEvent[] = "SegmentMetadataEvent";
inline constexpr char kAllocEvent[] = "AllocEvent";
inline constexpr char kFreeEvent[] = "FreeEvent";
inline constexpr char kCpuSampleEvent[] = "CpuSampleEvent";
inline constexpr char kMemoryProfileOverflowEvent[] = "MemoryProfileOverflowEvent";
inline constexpr char kSymbolTableEntry[] = "SymbolTableEntry";
// d9's own, untimestamped: a sampled allocation still live at seal (see encoder.h).
inline constexpr char kLiveAllocation[] = "Libd9LiveAllocation";
// d9's own, untimestamped: one module (path, build-id, range, load bias, still loaded?).
inline constexpr char kModuleEntry[] = "Libd9Module";
// d9's own, untimestamped (its time is a field): jemalloc's statistics at one moment.
inline constexpr char kAllocatorStats[] = "Libd9AllocatorStats";

// Magic bytes of the compressed containers segments may come in.
inline constexpr uint8_t kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};
inline constexpr uint8_t kGzipMagic[2] = {0x1F, 0x8B};

}  // namespace d9::fmt
