// libd9_ship.so's one export: the client (ship/client.cc, linked in whole with every other
// archive's symbols hidden).
#include "ship/client.h"

extern "C" __attribute__((visibility("default"))) d9::ship::Client* d9_create_ship_client_v3(
    const d9::ship::Location& where, const d9::ship::Getenv& env, std::string* error) {
  return d9::ship::create_client(where, error, env);
}
