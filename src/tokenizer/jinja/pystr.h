// tokenizer/jinja/pystr.h — Python `str` semantics over UTF-8 bytes.
//
// Chat templates are Python code in disguise: `len(s)`, `s[::-1]`, `s.strip()`, `str(1.5)` and
// `repr(['a'])` all count and print the way CPython does. This file owns those rules for
// UTF-8 `std::string`s: code-point indexing and slicing, Unicode whitespace for strip/split,
// case mapping (ASCII, Latin-1, Greek and Cyrillic; other scripts pass through unchanged),
// `repr()` quoting, and the shortest round-trip float repr. Invalid UTF-8 bytes survive a
// round trip (each maps to a lone surrogate U+DC80+byte, as Python's surrogateescape does).
// Cost: ASCII-only strings take byte fast paths; others decode to UTF-32 once per call,
// O(n) time and memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hs::jinja::py {

// Decode UTF-8 to code points (invalid bytes become U+DC80+byte) and back.
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
bool is_ascii(std::string_view s);

// len(s): number of code points.
size_t length(std::string_view s);

// Python's str.isspace() for one code point.
bool is_space(char32_t c);

// str.strip / lstrip / rstrip; `chars` = nullopt strips Unicode whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split(sep, maxsplit) / str.rsplit; sep = nullopt splits on whitespace runs.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);

// str.splitlines() (keepends=False).
std::vector<std::string> splitlines(std::string_view s);

// Case mapping (see file comment for the covered scripts).
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
bool is_lower(std::string_view s);  // str.islower()
bool is_upper(std::string_view s);  // str.isupper()

// str.replace(old, new, count) with count < 0 meaning all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

// str.find / str.rfind in code points; -1 when absent.
int64_t find(std::string_view s, std::string_view sub, bool from_right);

// repr(s) for a str: quotes and escapes like CPython.
std::string repr_string(std::string_view s);

// repr(x) / str(x) for a float: shortest round-trip, '1.0', '1e+16', 'inf', 'nan'.
std::string float_repr(double d);

// Python slice arithmetic: resolves (start, stop, step) against a length, like slice.indices().
// Returns the selected indices in order. step must be non-zero.
std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, int64_t step);

}  // namespace hs::jinja::py
