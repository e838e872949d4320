// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target: the safetensors reader
// (formats/safetensors.h) on arbitrary bytes: the JSON header, offsets and dtypes. A file that
// parses has every tensor's bytes inside the buffer (touched here, checked by ASan) and
// converts to f32 when its dtype allows.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = hs::safetensors::File::from_bytes(std::span<const uint8_t>(data, size));
  if (!f.is_ok()) return 0;
  const hs::safetensors::File& file = **f;
  volatile uint8_t sink = 0;
  for (const auto& [key, value] : file.metadata()) (void)file.get_metadata(key);
  for (const auto& t : file.tensors()) {
    (void)t.n_elements();
    (void)t.shape_string();
    if (t.data && t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    if (t.n_bytes <= (1u << 20)) (void)hs::safetensors::File::to_f32(t);
    (void)file.find(t.name);
  }
  return 0;
}
