// tokenizer/jinja/lexer.cpp — see lexer.h. Mirrors the rules of Jinja's regex lexer with a
// hand-written scanner: data runs up to the next `{{`, `{%` or `{#`; tags are scanned token by
// token until their closing delimiter at bracket depth zero.
#include "tokenizer/jinja/lexer.h"

#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/value.h"

namespace hs::jinja {

namespace {

[[noreturn]] void syntax_error(int line, const std::string& msg) {
  fail(StatusCode::kInvalidArgument, fmt::format("jinja syntax error at line {}: {}", line, msg), line);
}

// One code point at `pos` (invalid bytes decode as themselves); `len` receives its size.
char32_t peek_cp(std::string_view s, size_t pos, size_t* len) {
  size_t n = 1;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c >= 0xF0) n = 4;
  else if (c >= 0xE0) n = 3;
  else if (c >= 0xC0) n = 2;
  if (pos + n > s.size()) n = 1;
  std::u32string cps = py::decode(s.substr(pos, n));
  *len = n;
  return cps.size() == 1 ? cps[0] : c;
}

bool space_at(std::string_view s, size_t pos, size_t* len) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) {
    *len = 1;
    return py::is_space(c);
  }
  return py::is_space(peek_cp(s, pos, len));
}

size_t skip_spaces(std::string_view s, size_t pos) {
  size_t len = 0;
  while (pos < s.size() && space_at(s, pos, &len)) pos += len;
  return pos;
}

bool all_space(std::string_view s) {
  size_t pos = 0, len = 0;
  while (pos < s.size()) {
    if (!space_at(s, pos, &len)) return false;
    pos += len;
  }
  return true;
}

std::string rstrip_space(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    unsigned char c = static_cast<unsigned char>(s[e - 1]);
    if (c >= 0x80) return py::strip(s.substr(0, e), std::nullopt, false, true);
    if (!py::is_space(c)) break;
    --e;
  }
  return std::string(s.substr(0, e));
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's unicode-escape decoding of a string literal body.
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  auto hex_value = [&](size_t pos, size_t count) -> char32_t {
    if (pos + count > body.size()) syntax_error(line, "truncated escape in string literal");
    char32_t v = 0;
    for (size_t i = 0; i < count; ++i) {
      char c = body[pos + i];
      int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) syntax_error(line, "truncated escape in string literal");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  };
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': py::append_utf8(out, hex_value(i + 1, 2)); i += 2; break;
      case 'u': py::append_utf8(out, hex_value(i + 1, 4)); i += 4; break;
      case 'U': {
        char32_t cp = hex_value(i + 1, 8);
        if (cp > 0x10FFFF) syntax_error(line, "illegal Unicode character in string literal");
        py::append_utf8(out, cp);
        i += 8;
        break;
      }
      case 'N': syntax_error(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          py::append_utf8(out, v);
        } else {
          out.push_back('\\');  // unknown escapes keep their backslash
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < s_.size()) {
      size_t k = find_tag_start(pos);
      if (k == std::string::npos) {
        emit_data(std::string_view(s_).substr(pos), line_);
        break;
      }
      char kind = s_[k + 1];
      size_t after = k + 2;
      char sign = 0;
      if (after < s_.size() && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
      std::string_view text = std::string_view(s_).substr(pos, k - pos);
      int text_line = line_;
      size_t raw_body = kind == '%' ? match_raw_begin(after) : std::string::npos;
      emit_data(apply_strip(text, sign, kind != '{'), text_line);
      line_ += count_newlines(text);
      if (raw_body != std::string::npos) {
        line_ += count_newlines(std::string_view(s_).substr(k, raw_body - k));
        line_starting_ = s_[raw_body - 1] == '\n';
        pos = lex_raw(raw_body);
      } else if (kind == '#') {
        pos = lex_comment(after);
      } else {
        pos = lex_tag(after, kind == '%');
      }
    }
    tokens_.push_back(Token{TokType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t pos) const {
    while (true) {
      size_t k = s_.find('{', pos);
      if (k == std::string::npos || k + 1 >= s_.size()) return std::string::npos;
      char c = s_[k + 1];
      if (c == '{' || c == '%' || c == '#') return k;
      pos = k + 1;
    }
  }

  // Whitespace control on the data before a tag: `-` strips all trailing whitespace; otherwise
  // lstrip_blocks removes the indentation of a block/comment tag that starts its line.
  std::string apply_strip(std::string_view text, char sign, bool is_block) const {
    if (sign == '-') return rstrip_space(text);
    if (sign != '+' && is_block) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        std::string_view tail = text.substr(l_pos);
        if (!tail.empty() && all_space(tail)) return std::string(text.substr(0, l_pos));
      }
    }
    return std::string(text);
  }

  void emit_data(std::string_view text, int line) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokType::kData, std::string(text), line});
  }

  // `{% raw %}` opener: returns the position after it, or npos.
  size_t match_raw_begin(size_t pos) const {
    pos = skip_spaces(s_, pos);
    if (s_.compare(pos, 3, "raw") != 0) return std::string::npos;
    pos = skip_spaces(s_, pos + 3);
    if (s_.compare(pos, 3, "-%}") == 0) return skip_spaces(s_, pos + 3);
    if (s_.compare(pos, 2, "%}") == 0) return pos + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t pos) {
    size_t search = pos;
    while (true) {
      size_t k = s_.find("{%", search);
      if (k == std::string::npos) syntax_error(line_, "missing end of raw directive");
      size_t p = k + 2;
      char sign = 0;
      if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
      p = skip_spaces(s_, p);
      if (s_.compare(p, 6, "endraw") != 0) {
        search = k + 2;
        continue;
      }
      p = skip_spaces(s_, p + 6);
      size_t end = close_block(p);
      if (end == std::string::npos) {
        search = k + 2;
        continue;
      }
      std::string_view body = std::string_view(s_).substr(pos, k - pos);
      emit_data(apply_strip(body, sign, true), line_);
      line_ += count_newlines(std::string_view(s_).substr(pos, end - pos));
      line_starting_ = s_[end - 1] == '\n';
      return end;
    }
  }

  // Block closer at `p` (`+%}`, `-%}` + whitespace, `%}` + one newline); npos if none.
  size_t close_block(size_t p) const {
    if (s_.compare(p, 3, "+%}") == 0) return p + 3;
    if (s_.compare(p, 3, "-%}") == 0) return skip_spaces(s_, p + 3);
    if (s_.compare(p, 2, "%}") == 0) return (p + 2 < s_.size() && s_[p + 2] == '\n') ? p + 3 : p + 2;
    return std::string::npos;
  }

  size_t lex_comment(size_t pos) {
    size_t e = s_.find("#}", pos);
    if (e == std::string::npos) syntax_error(line_, "missing end of comment tag");
    size_t end;
    if (e > pos && s_[e - 1] == '-') end = skip_spaces(s_, e + 2);
    else if (e > pos && s_[e - 1] == '+') end = e + 2;
    else end = (e + 2 < s_.size() && s_[e + 2] == '\n') ? e + 3 : e + 2;
    line_ += count_newlines(std::string_view(s_).substr(pos, end - pos));
    line_starting_ = s_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t pos, bool block) {
    int open_line = line_;
    tokens_.push_back(Token{block ? TokType::kBlockBegin : TokType::kVarBegin, "", line_});
    std::string brackets;
    while (true) {
      if (pos >= s_.size()) {
        syntax_error(open_line, block ? "unexpected end of template: unclosed '{%' tag"
                                      : "unexpected end of template: unclosed '{{' tag");
      }
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (block) {
          end = close_block(pos);
        } else if (s_.compare(pos, 3, "-}}") == 0) {
          end = skip_spaces(s_, pos + 3);
        } else if (s_.compare(pos, 2, "}}") == 0) {
          end = pos + 2;
        }
        if (end != std::string::npos) {
          tokens_.push_back(Token{block ? TokType::kBlockEnd : TokType::kVarEnd, "", line_});
          line_ += count_newlines(std::string_view(s_).substr(pos, end - pos));
          line_starting_ = s_[end - 1] == '\n';
          return end;
        }
      }
      size_t len = 0;
      if (space_at(s_, pos, &len)) {
        line_ += s_[pos] == '\n';
        pos += len;
        continue;
      }
      pos = lex_expr_token(pos, brackets);
    }
  }

  size_t lex_expr_token(size_t pos, std::string& brackets) {
    char c = s_[pos];
    if (is_digit(c)) return lex_number(pos);
    if (is_name_start(c)) {
      size_t e = pos;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      tokens_.push_back(Token{TokType::kName, s_.substr(pos, e - pos), line_});
      return e;
    }
    if (c == '\'' || c == '"') {
      size_t e = pos + 1;
      while (e < s_.size() && s_[e] != c) e += s_[e] == '\\' ? 2 : 1;
      if (e >= s_.size()) syntax_error(line_, "unterminated string literal");
      Token t{TokType::kString, unescape(std::string_view(s_).substr(pos + 1, e - pos - 1), line_), line_};
      tokens_.push_back(std::move(t));
      line_ += count_newlines(std::string_view(s_).substr(pos, e - pos));
      return e + 1;
    }
    static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kOps2) {
      if (s_.compare(pos, 2, op) == 0) {
        tokens_.push_back(Token{TokType::kOp, op, line_});
        return pos + 2;
      }
    }
    static const std::string kOps1 = "+-/*%~[](){}><=.:|,;";
    if (kOps1.find(c) == std::string::npos) {
      size_t len = 0;
      char32_t cp = peek_cp(s_, pos, &len);
      std::string shown;
      py::append_utf8(shown, cp);
      syntax_error(line_, fmt::format("unexpected character '{}'", shown));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) syntax_error(line_, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) {
        syntax_error(line_, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      }
      brackets.pop_back();
    }
    tokens_.push_back(Token{TokType::kOp, std::string(1, c), line_});
    return pos + 1;
  }

  // Digits with optional `_` separators; floats need a fraction or an exponent.
  size_t digits(size_t p) const {
    size_t start = p;
    while (p < s_.size() && (is_digit(s_[p]) || (s_[p] == '_' && p > start && p + 1 < s_.size() && is_digit(s_[p + 1])))) ++p;
    return p;
  }

  size_t lex_number(size_t pos) {
    // Hex / octal / binary integers.
    if (s_[pos] == '0' && pos + 1 < s_.size() && std::string("xXoObB").find(s_[pos + 1]) != std::string::npos) {
      char base_ch = static_cast<char>(s_[pos + 1] | 0x20);
      int base = base_ch == 'x' ? 16 : base_ch == 'o' ? 8 : 2;
      size_t e = pos + 2;
      std::string clean;
      while (e < s_.size()) {
        char c = static_cast<char>(s_[e] | 0x20);
        int d = is_digit(s_[e]) ? s_[e] - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (s_[e] == '_') {
          ++e;
          continue;
        }
        if (d < 0 || d >= base) break;
        clean.push_back(s_[e]);
        ++e;
      }
      if (clean.empty()) syntax_error(line_, "invalid integer literal");
      return push_int(clean, base, e);
    }
    size_t int_end = digits(pos);
    size_t e = int_end;
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
      if (x < s_.size() && is_digit(s_[x])) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string clean;
    for (size_t i = pos; i < e; ++i) {
      if (s_[i] != '_') clean.push_back(s_[i]);
    }
    if (is_float) {
      Token t{TokType::kFloat, clean, line_};
      t.float_value = std::strtod(clean.c_str(), nullptr);
      tokens_.push_back(std::move(t));
      return e;
    }
    // Jinja's decimal integers cannot have leading zeros ("0", "00" are fine).
    if (clean.size() > 1 && clean[0] == '0') {
      size_t z = 0;
      while (z < clean.size() && clean[z] == '0') ++z;
      if (z != clean.size()) return push_int("0", 10, pos + 1);
    }
    return push_int(clean, 10, e);
  }

  size_t push_int(const std::string& digits_only, int base, size_t end) {
    errno = 0;
    char* stop = nullptr;
    long long v = std::strtoll(digits_only.c_str(), &stop, base);
    if (errno == ERANGE) syntax_error(line_, "integer literal is too large (64-bit integers only)");
    Token t{TokType::kInt, digits_only, line_};
    t.int_value = v;
    tokens_.push_back(std::move(t));
    return end;
  }

  std::string s_;
  std::vector<Token> tokens_;
  int line_ = 1;
  bool line_starting_ = true;
};

// "\r\n" and "\r" become "\n"; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace hs::jinja
