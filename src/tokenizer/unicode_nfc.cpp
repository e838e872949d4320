// tokenizer/unicode_nfc.cpp — NFC over the generated tables (see unicode_nfc.h).
//
// Composition follows the Unicode sample implementation (UAX #15): the last starter is kept
// with the class of the last character appended after it; a character combines with that
// starter when nothing between them blocks it (it is adjacent, or the previous character's class
// is non-zero and lower than its own).
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/unicode.h"

namespace hs::tok {
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct Tables {
  std::unordered_map<uint32_t, const nfc_data::Decomp*> decomp;  // cp -> its decomposition
  std::unordered_map<uint64_t, uint32_t> compose;                // (first << 32 | second) -> cp
  Tables() {
    decomp.reserve(nfc_data::kDecompCount);
    for (size_t i = 0; i < nfc_data::kDecompCount; ++i) {
      const nfc_data::Decomp& d = nfc_data::kDecomp[i];
      decomp.emplace(d.cp, &d);
      if (d.composes) compose.emplace(static_cast<uint64_t>(d.first) << 32 | d.second, d.cp);
    }
  }
  static const Tables& get() {
    static const Tables t;
    return t;
  }
};

uint8_t ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  const nfc_data::CccRange* b = nfc_data::kCcc;
  const nfc_data::CccRange* e = nfc_data::kCcc + nfc_data::kCccCount;
  const auto* it = std::upper_bound(b, e, cp, [](uint32_t c, const nfc_data::CccRange& r) { return c < r.first; });
  if (it == b) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(const Tables& t, uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = cp < 0xC0 ? t.decomp.end() : t.decomp.find(cp);
  if (it == t.decomp.end()) {
    out.push_back(cp);
    return;
  }
  decompose(t, it->second->first, out);
  if (it->second->second) decompose(t, it->second->second, out);
}

// The primary composite of (a, b), or 0.
uint32_t compose_pair(const Tables& t, uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = t.compose.find(static_cast<uint64_t>(a) << 32 | b);
  return it == t.compose.end() ? 0 : it->second;
}

}  // namespace

bool nfc_trivially_stable(std::string_view s) {
  // UTF-8 lead bytes of U+0300 and above are 0xCC..0xF4; continuation bytes are < 0xC0.
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0xCC) return false;
  return true;
}

std::string nfc(std::string_view s) {
  if (nfc_trivially_stable(s)) return std::string(s);
  const Tables& t = Tables::get();
  std::vector<uint32_t> d;  // [code points] fully decomposed
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_valid_len(s, i);
    if (len == 0) {  // not expected (input is repaired first): keep the byte as it is
      d.push_back(0x80000000u | static_cast<uint8_t>(s[i]));
      ++i;
      continue;
    }
    decompose(t, utf8_decode(s, i, len), d);
    i += len;
  }
  std::vector<uint8_t> cls(d.size());  // [code points] combining class
  for (size_t i = 0; i < d.size(); ++i) cls[i] = d[i] & 0x80000000u ? 0 : ccc_of(d[i]);
  // Canonical ordering: stable sort of every run of non-starters by class.
  for (size_t i = 0; i < d.size();) {
    if (cls[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && cls[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, uint32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(cls[k], d[k]);
      std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) std::tie(cls[k], d[k]) = run[k - i];
    }
    i = j;
  }
  // Canonical composition, in place: out is d[0, n_out).
  size_t n_out = 0;
  int64_t starter = -1;  // index in the output of the last starter
  uint8_t last = 0;      // class of the last character appended after it (0: adjacent)
  for (size_t i = 0; i < d.size(); ++i) {
    const uint32_t c = d[i];
    const uint8_t k = cls[i];
    if (starter >= 0 && !(c & 0x80000000u) && !(d[starter] & 0x80000000u) &&
        ((last == 0 && n_out == static_cast<size_t>(starter) + 1) || (last != 0 && last < k))) {
      if (const uint32_t comp = compose_pair(t, d[starter], c)) {
        d[starter] = comp;
        continue;
      }
    }
    if (k == 0) starter = static_cast<int64_t>(n_out);
    last = k;
    d[n_out++] = c;
  }
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < n_out; ++i) {
    if (d[i] & 0x80000000u) out.push_back(static_cast<char>(d[i] & 0xFF));
    else utf8_append(out, d[i]);
  }
  return out;
}

}  // namespace hs::tok
