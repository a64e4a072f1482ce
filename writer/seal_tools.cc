#include "writer/seal_tools.h"

#include <dlfcn.h>

namespace d9 {

SealTools* load_seal_tools(bool inflate_compressed_debug_files, std::string* error) {
  // The module sits next to the object this function is in (libd9.so).
  Dl_info self;
  if (!dladdr(reinterpret_cast<void*>(&load_seal_tools), &self) || !self.dli_fname) {
    *error = "cannot find libd9.so's own path";
    return nullptr;
  }
  std::string path = self.dli_fname;
  size_t slash = path.rfind('/');
  path =
      (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + kSealToolsLibrary;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    *error = why ? why : ("cannot load " + path);
    return nullptr;
  }
  auto create = reinterpret_cast<CreateSealToolsFn>(dlsym(lib, kSealToolsEntry));
  SealTools* tools = create ? create(inflate_compressed_debug_files) : nullptr;
  if (!tools) *error = path + " has no " + kSealToolsEntry;
  return tools;
}

}  // namespace d9
