// The d9 command's S3 subcommands (cli/d9.cc dispatches to them).
//
//   d9 ship DIR... s3://bucket[/prefix] [--watch]
//       uploads the sealed segments left on disk with the same client, layout, checks and
//       deletion rule as libd9.so's worker; `.active` files of processes that are gone are
//       sealed first (symbolized in place, as `d9 symbolize --in-place` does).
#pragma once

namespace d9::ship {

int cmd_ship(int argc, char** argv);

}  // namespace d9::ship
