// A small stand-in for a service, for the README's demo: it parses requests, caches
// results, builds responses, and keeps a slowly growing "session" table that is never
// trimmed. `d9 alloc` should show where the bytes come from.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Request {
  std::string path;
  std::vector<std::string> headers;
};

__attribute__((noinline)) Request parse_request(unsigned id) {
  Request r;
  r.path = "/api/v1/items/" + std::to_string(id % 5000);
  for (int h = 0; h < 8; ++h) r.headers.push_back("x-header-" + std::to_string(h) + ": value");
  return r;
}

__attribute__((noinline)) std::string render_response(const Request& r, unsigned id) {
  std::string body;
  body.reserve(16 * 1024);
  for (int i = 0; i < 64; ++i) body += r.path + "#" + std::to_string(id + i) + ";";
  return body;
}

std::unordered_map<std::string, std::string> g_cache;
std::map<unsigned, std::unique_ptr<char[]>> g_sessions;

__attribute__((noinline)) void remember_session(unsigned id) {
  // 4 KiB per 16 requests, never freed: the "leak".
  if (id % 16 == 0) g_sessions.emplace(id, std::make_unique<char[]>(4096));
}

__attribute__((noinline)) void cache_result(const Request& r, const std::string& body) {
  if (g_cache.size() > 2000) g_cache.clear();
  g_cache[r.path] = body.substr(0, 256);
}

}  // namespace

int main() {
  size_t checksum = 0;
  for (unsigned id = 0; id < 300000; ++id) {
    Request r = parse_request(id);
    std::string body = render_response(r, id);
    cache_result(r, body);
    remember_session(id);
    checksum += body.size();
  }
  printf("served 300000 requests, %zu response bytes, %zu sessions kept\n", checksum,
         g_sessions.size());
  return 0;
}
