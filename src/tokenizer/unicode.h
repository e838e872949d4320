// tokenizer/unicode.h — the little Unicode the tokenizers need: UTF-8 stepping and repair,
// GPT-2's byte <-> code point map, and Python's notion of whitespace.
//
// Everything here works on UTF-8 bytes in place; nothing allocates except the functions that
// return a std::string. Cost: one table lookup per byte for the byte map, a branchy decode per
// code point, and a single pass for validation/repair.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace hs::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not one
// (bad lead, bad continuation, overlong, surrogate, > U+10FFFF, truncated).
size_t utf8_valid_len(std::string_view s, size_t i);
// Decode the code point at s[i] (which must start a valid sequence of `len` bytes).
uint32_t utf8_decode(std::string_view s, size_t i, size_t len);
// Number of code points in valid UTF-8 (invalid bytes count one each).
size_t utf8_count(std::string_view s);
void utf8_append(std::string& out, uint32_t cp);
bool utf8_is_valid(std::string_view s);
// Replace each maximal ill-formed subsequence by U+FFFD (the Unicode "substitution of maximal
// subparts" practice, as Rust's String::from_utf8_lossy does).
std::string utf8_repair(std::string_view s);

// True for the characters Python's str.isspace() accepts (what str.strip() removes).
bool is_python_space(uint32_t cp);

// GPT-2's reversible byte <-> printable code point map (`bytes_to_unicode`).
class ByteMap {
 public:
  static const ByteMap& get();
  uint32_t byte_to_cp(uint8_t b) const { return to_cp_[b]; }
  // UTF-8 spelling of a byte's code point (1 or 2 bytes).
  std::string_view byte_to_utf8(uint8_t b) const { return {spell_[b].data(), spell_len_[b]}; }
  // Byte for a code point of the map, or -1.
  int cp_to_byte(uint32_t cp) const { return cp < 512 ? from_cp_[cp] : -1; }
  // Spell raw bytes in the byte alphabet.
  std::string encode(std::string_view bytes) const;
  // Map a byte-level spelling back to bytes; characters outside the alphabet pass through
  // as their own UTF-8 (as HF's ByteLevel decoder does).
  std::string decode(std::string_view spelled) const;
  // True when every code point of `s` is in the alphabet.
  bool is_spelled(std::string_view s) const;

 private:
  ByteMap();
  std::array<uint32_t, 256> to_cp_{};
  std::array<int16_t, 512> from_cp_{};
  std::array<std::array<char, 2>, 256> spell_{};
  std::array<uint8_t, 256> spell_len_{};
};

}  // namespace hs::tok
