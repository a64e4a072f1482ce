// `d9 symbolize`: adds SymbolTableEntry records (dial9-format.md §2.7) to segments written
// without them (D9_SYMBOLIZE=0, or `.active` files of a process that was killed), offline,
// from the module map libd9 records (Libd9Module events) and the files it names, checked
// by build-id. See symbolize_files() and the README.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace d9::cli {

struct SymbolizeOptions {
  std::string out_dir;    // -o DIR: write there (directory inputs keep their sub-directories)
  bool in_place = false;  // --in-place: replace the input (temp file, then rename)
  bool quiet = false;     // -q: no per-file report lines, only problems
  bool debuginfod = false;
};

// What happened to one input, for the report and the tests.
struct SymbolizeFileResult {
  std::string input, output;  // output is "" when nothing was written
  bool ok = false;            // readable and written (or nothing left to do)
  uint64_t addresses = 0;     // distinct callchain addresses without symbols
  uint64_t resolved = 0, unresolved = 0;
};

// Symbolizes every segment under `paths` (files, or directories searched recursively).
//
// For each file: the callchain addresses of its events that have no SymbolTableEntry yet
// are resolved through the segment's module map; the output is the segment's raw bytes
// (cut after the last whole frame when the file was truncated) followed by a fresh
// sub-stream ("TRC\0" header) holding the new SymbolTableEntry records, compressed as the
// input was (zstd, a single gzip member, or raw). A segment without a module map (an
// `.active` file never sealed) borrows the one of the newest sealed segment beside it from
// the same process (same boot id), and the output carries that map too.
//
// Output names: `STEM.bin[.zst|.gz]` for an input `STEM.bin[.zst|.gz][.active]`, next to
// the input, in out_dir, or in place of the input. Next to the input, an existing file is
// never replaced (a sealed input would be: use -o or --in-place). With --in-place an
// `.active` input is removed once its `.bin` is written.
//
// Writes a report line per file on `report` and problems on stderr. Returns the exit status:
// 0 when at least one file was processed, 1 when none was.
int symbolize_files(const std::vector<std::string>& paths, const SymbolizeOptions& options,
                    FILE* report, std::vector<SymbolizeFileResult>* results = nullptr);

}  // namespace d9::cli
