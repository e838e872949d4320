// tests/fuzz/fuzz_gguf.cpp — libFuzzer target: the GGUF reader (formats/gguf.h) on arbitrary
// bytes. Parses from memory, then reads every metadata value through the typed getters and
// walks the tensor table, so a header that parses cannot hand out an out-of-bounds view.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = hs::gguf::File::from_bytes(std::span<const uint8_t>(data, size));
  if (!f.is_ok()) return 0;
  const hs::gguf::File& file = **f;
  for (const auto& kv : file.metadata()) {
    (void)file.get_string(kv.first);
    (void)file.get_int(kv.first);
    (void)file.get_float(kv.first);
    (void)file.get_bool(kv.first);
    if (auto a = file.get_string_array(kv.first); a.is_ok())
      for (std::string_view s : *a) (void)s.size();
    (void)file.get_float_array(kv.first);
    (void)file.get_int_array(kv.first);
  }
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors()) {
    (void)t.n_elements();
    (void)t.shape_string();
    if (t.data && t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];  // inside the bytes (ASan)
    (void)file.find_tensor(t.name);
  }
  return 0;
}
