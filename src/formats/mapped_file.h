// formats/mapped_file.h — read-only memory mapping of a whole file, shared by the model
// file readers (GGUF, safetensors). Cost: one open + fstat + mmap; pages load on first touch.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace hs {

struct MappedRegion {
  const uint8_t* base = nullptr;  // [size] bytes; null for an empty file
  uint64_t size = 0;
};

// Maps `path` read-only. `what` names the format in error messages ("gguf", "safetensors").
Result<MappedRegion> map_file(const std::string& path, const char* what);
// Releases a region from map_file (no-op for an empty one).
void unmap_file(const MappedRegion& r);

}  // namespace hs
