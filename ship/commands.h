// The d9 command's S3 subcommands (cli/d9.cc dispatches to them).
//
//   d9 ship DIR... s3://bucket[/prefix] [--watch]
//       uploads the sealed segments left on disk with the same client, layout, checks and
//       deletion rule as libd9.so's worker; `.active` files of processes that are gone are
//       sealed first (symbolized in place, as `d9 symbolize --in-place` does).
//
//   d9 ls s3://bucket[/prefix] [--service S] [--host H] [--from T] [--to T] [--json]
//       what the bucket holds: dates, services, hosts, processes, segments, bytes, and the
//       busiest minutes.
//
//   d9 fetch s3://bucket[/prefix] -o DIR [selection] [--decompress]
//       the selected segments as local files, DIR/{key} (raw .bin with --decompress).
//
// Selection (ls, fetch, and every analysis command given s3://…): --service, --host,
// --process, --from/--to (Unix time or a UTC date), --sample N; or the same as URL
// parameters (s3://b/p?host=h&from=...), which win.
#pragma once

#include "ship/bucket.h"

namespace d9::ship {

int cmd_ship(int argc, char** argv);
int cmd_ls(int argc, char** argv);
int cmd_fetch(int argc, char** argv);
// Lets the analysis commands read s3://… paths (cli::set_remote_inputs): selected with
// `base` (and the URL's own parameters), downloaded into the cache.
void use_for_s3_paths(const Selection& base);

}  // namespace d9::ship
