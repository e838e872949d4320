// tokenizer/jinja/pystr.cpp — Python `str` semantics over UTF-8 (see pystr.h).
//
// Everything here is a pure function of its inputs. ASCII fast paths avoid the UTF-32 decode
// for the common case; non-ASCII strings cost one decode and one encode per call.
#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hs::jinja::py {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    unsigned char c = p[i];
    int len = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Reject overlong forms, surrogates and out-of-range values.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (ok) {
      out.push_back(cp);
      i += len;
    } else {
      out.push_back(0xDC00 + c);  // surrogateescape
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode(s).size();
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set;
  if (chars) set = decode(*chars);
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    const std::string& d = *sep;  // non-empty: checked by the caller
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(d, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < d.size()) break;
        size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  std::u32string u = decode(s);
  int64_t n = static_cast<int64_t>(u.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && is_space(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        int64_t e = n;
        while (e > i && is_space(u[e - 1])) --e;
        parts.push_back(encode(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      int64_t j = i;
      while (j < n && !is_space(u[j])) ++j;
      parts.push_back(encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    int64_t i = n;
    while (true) {
      while (i > 0 && is_space(u[i - 1])) --i;
      if (i <= 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        int64_t b = 0;
        while (b < i && is_space(u[b])) ++b;
        parts.push_back(encode(std::u32string_view(u).substr(b, i - b)));
        break;
      }
      int64_t j = i;
      while (j > 0 && !is_space(u[j - 1])) --j;
      parts.push_back(encode(std::u32string_view(u).substr(j, i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> splitlines(std::string_view s) {
  std::u32string u = decode(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    lines.push_back(encode(std::u32string_view(u).substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    ++i;
    start = i;
  }
  if (start < u.size()) lines.push_back(encode(std::u32string_view(u).substr(start)));
  return lines;
}

// --- case mapping -------------------------------------------------------------------------

static char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c % 2) ? c - 1 : c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2) ? c : c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c % 2) ? c - 1 : c;
  return c;
}

static char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c % 2) ? c : c + 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2) ? c + 1 : c;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c % 2) ? c : c + 1;
  return c;
}

static bool cp_is_lower(char32_t c) { return to_upper_cp(c) != c || c == 0xDF; }
static bool cp_is_upper(char32_t c) { return to_lower_cp(c) != c; }
static bool cp_is_cased(char32_t c) { return cp_is_lower(c) || cp_is_upper(c); }

static void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {  // ß -> SS
    out += U"SS";
    return;
  }
  out.push_back(to_upper_cp(c));
}

std::string upper(std::string_view s) {
  if (is_ascii(s)) {
    std::string r(s);
    for (char& c : r) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    }
    return r;
  }
  std::u32string u = decode(s), out;
  for (char32_t c : u) append_upper(out, c);
  return encode(out);
}

std::string lower(std::string_view s) {
  if (is_ascii(s)) {
    std::string r(s);
    for (char& c : r) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return r;
  }
  std::u32string u = decode(s), out;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    if (c == 0x3A3) {  // final sigma: after a cased letter and not before one
      bool before = i > 0 && cp_is_cased(u[i - 1]);
      bool after = i + 1 < u.size() && cp_is_cased(u[i + 1]);
      out.push_back(before && !after ? 0x3C2 : 0x3C3);
      continue;
    }
    out.push_back(to_lower_cp(c));
  }
  return encode(out);
}

std::string title(std::string_view s) {
  std::u32string u = decode(s), out;
  bool prev_cased = false;
  for (char32_t c : u) {
    if (prev_cased) {
      out.push_back(to_lower_cp(c));
    } else if (c == 0xDF) {
      out += U"Ss";
    } else {
      out.push_back(to_upper_cp(c));
    }
    prev_cased = cp_is_cased(c);
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s), out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      if (u[0] == 0xDF) out += U"Ss";
      else out.push_back(to_upper_cp(u[0]));
    } else {
      out.push_back(to_lower_cp(u[i]));
    }
  }
  return encode(out);
}

bool is_lower(std::string_view s) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (cp_is_upper(c)) return false;
    if (cp_is_lower(c)) any = true;
  }
  return any;
}

bool is_upper(std::string_view s) {
  bool any = false;
  for (char32_t c : decode(s)) {
    if (cp_is_lower(c)) return false;
    if (cp_is_upper(c)) any = true;
  }
  return any;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    std::u32string u = decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, hit)));
}

// Code points that CPython's str.isprintable() rejects, beyond ASCII controls. An
// approximation of the Unicode tables: the separators, format characters and private-use
// ranges a chat message can realistically contain.
static bool cp_is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x61C || (c >= 0x600 && c <= 0x605) || c == 0x6DD || c == 0x70F || c == 0x1680 ||
      c == 0x180E)
    return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000)
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF0 && c <= 0xFFFB) ||
      c == 0xFFFE || c == 0xFFFF)
    return false;
  if ((c >= 0xE0000 && c <= 0xE0FFF) || c >= 0xF0000) return false;
  return true;
}

std::string repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  char buf[16];
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (cp_is_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c <= 0xFFFF) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);
  bool neg = false;
  if (!sci.empty() && sci[0] == '-') {
    neg = true;
    sci.remove_prefix(1);
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  int decpt = exp + 1;  // digits[0..decpt) are the integer part
  std::string out = neg ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += buf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits;
    out.append(decpt - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, decpt);
    out += '.';
    out += digits.substr(decpt);
  }
  return out;
}

std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, int64_t step) {
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  int64_t b = adjust(start, step < 0 ? len - 1 : 0);
  int64_t e = adjust(stop, step < 0 ? -1 : len);
  std::vector<int64_t> idx;
  if (step > 0) {
    for (int64_t i = b; i < e; i += step) idx.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += step) idx.push_back(i);
  }
  return idx;
}

}  // namespace hs::jinja::py
