// tokenizer/unicode.cpp — UTF-8 stepping/repair, GPT-2 byte map, Python whitespace.
//
// The validity rules are those of the Unicode standard (table 3-7): the second byte's range
// depends on the lead (E0: A0..BF, ED: 80..9F, F0: 90..BF, F4: 80..8F), which is also what
// makes "maximal subpart" repair well defined.
#include "tokenizer/unicode.h"

namespace hs::tok {
namespace {

// Allowed range of the second byte for a lead byte, and the sequence length; len 0: bad lead.
struct Lead {
  uint8_t len, lo, hi;
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the valid prefix of the sequence at s[i] (>= 1 on a good lead), and whether it
// is complete.
size_t valid_prefix(std::string_view s, size_t i, bool* complete) {
  const Lead l = lead_info(static_cast<uint8_t>(s[i]));
  *complete = false;
  if (l.len == 0) return 0;
  if (l.len == 1) {
    *complete = true;
    return 1;
  }
  size_t k = 1;
  for (; k < l.len; ++k) {
    if (i + k >= s.size()) return k;
    const uint8_t c = static_cast<uint8_t>(s[i + k]);
    const uint8_t lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
    if (c < lo || c > hi) return k;
  }
  *complete = true;
  return k;
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t i) {
  bool complete = false;
  const size_t n = valid_prefix(s, i, &complete);
  return complete ? n : 0;
}

uint32_t utf8_decode(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

size_t utf8_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const size_t len = utf8_valid_len(s, i);
    i += len ? len : 1;
  }
  return n;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_valid_len(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    const size_t n = valid_prefix(s, i, &complete);
    if (complete) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      utf8_append(out, kReplacementChar);
      i += n ? n : 1;
    }
  }
  return out;
}

bool is_python_space(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

ByteMap::ByteMap() {
  from_cp_.fill(-1);
  // Printable Latin-1 bytes keep their code point; the rest get 256, 257, ... in byte order.
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
    to_cp_[b] = cp;
    from_cp_[cp] = static_cast<int16_t>(b);
    std::string s;
    utf8_append(s, cp);
    spell_len_[b] = static_cast<uint8_t>(s.size());
    for (size_t k = 0; k < s.size(); ++k) spell_[b][k] = s[k];
  }
}

const ByteMap& ByteMap::get() {
  static const ByteMap map;
  return map;
}

std::string ByteMap::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(byte_to_utf8(static_cast<uint8_t>(c)));
  return out;
}

std::string ByteMap::decode(std::string_view spelled) const {
  std::string out;
  out.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size();) {
    const size_t len = utf8_valid_len(spelled, i);
    if (len == 0) {
      out += spelled[i++];
      continue;
    }
    const int b = cp_to_byte(utf8_decode(spelled, i, len));
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {
      out.append(spelled.substr(i, len));
    }
    i += len;
  }
  return out;
}

bool ByteMap::is_spelled(std::string_view s) const {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_valid_len(s, i);
    if (len == 0 || cp_to_byte(utf8_decode(s, i, len)) < 0) return false;
    i += len;
  }
  return true;
}

}  // namespace hs::tok
