// tests/unit/tokenizer/hf_expected.h — a tokenizer against the ids HF `tokenizers` gave for the
// committed corpus (tests/fixtures/tokenizer/corpus.json and an *expected.json of
// tools/reference/gen_tokenizer_fixtures.py or gen_hf_tokenizer_fixtures.py), and the
// decode(encode(x)) round trip. Shared by the GGUF tokenizer tests and the tokenizer.json ones.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"

namespace hs::test {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> strings = [] {
    const json j = json::parse(read_file(fs::path(HS_FIXTURES_DIR) / "tokenizer/corpus.json"));
    return j.at("strings").get<std::vector<std::string>>();
  }();
  return strings;
}

inline std::string show_ids(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

inline std::string escape(const std::string& s) { return json(s).dump(); }

// Every corpus string: ids with HF's defaults, ids without special handling, decoded text.
inline void check_against_hf(const Tokenizer& tok, const fs::path& fixture, const char* name) {
  const json exp = json::parse(read_file(fixture));
  const auto& cases = exp.at("cases");
  const auto& texts = corpus();
  ASSERT_EQ(cases.size(), texts.size()) << "fixture and corpus disagree; regenerate both";
  const bool add_bos = exp.at("add_bos").get<bool>();
  size_t ids_ok = 0, plain_ok = 0, decode_ok = 0, reported = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string& text = texts[i];
    const json& c = cases[i];
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    std::vector<int32_t> want_plain;
    if (c.contains("ids_plain")) {
      want_plain = c.at("ids_plain").get<std::vector<int32_t>>();
    } else {
      want_plain.assign(want.begin() + (add_bos ? 1 : 0), want.end());
    }
    const std::string want_text = c.contains("decoded") ? c.at("decoded").get<std::string>() : text;

    const auto got = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
    const auto got_plain = tok.encode(text, /*add_special=*/false, /*parse_special=*/false);
    const std::string got_text = tok.decode(want, /*skip_special=*/true);
    ids_ok += got == want;
    plain_ok += got_plain == want_plain;
    decode_ok += got_text == want_text;
    if ((got != want || got_plain != want_plain || got_text != want_text) && reported++ < 8) {
      ADD_FAILURE() << name << " case " << i << " text " << escape(text)
                    << "\n  ids        want " << show_ids(want) << "\n             got  "
                    << show_ids(got) << "\n  ids_plain  want " << show_ids(want_plain)
                    << "\n             got  " << show_ids(got_plain) << "\n  decode     want "
                    << escape(want_text) << "\n             got  " << escape(got_text);
    }
  }
  std::printf("[ %s ] HF match: ids %zu/%zu, ids_plain %zu/%zu, decode %zu/%zu\n", name, ids_ok,
              texts.size(), plain_ok, texts.size(), decode_ok, texts.size());
  EXPECT_EQ(ids_ok, texts.size());
  EXPECT_EQ(plain_ok, texts.size());
  EXPECT_EQ(decode_ok, texts.size());
}

// decode(encode(x)) == x. SentencePiece maps a literal "▁" in the input to a space, so strings
// holding one cannot round-trip there (HF gives the same). A tokenizer that normalizes to NFC
// (qwen2) gives back the NFC of the text.
inline void check_round_trip(const Tokenizer& tok, bool spm, bool nfc = false) {
  size_t checked = 0;
  for (const std::string& text : corpus()) {
    if (spm && text.find("\xE2\x96\x81") != std::string::npos) continue;
    ++checked;
    const std::string want = nfc ? tok::nfc(text) : text;
    for (bool add_special : {false, true}) {
      const auto ids = tok.encode(text, add_special, /*parse_special=*/false);
      EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), want)
          << "add_special=" << add_special << " text " << escape(text);
    }
    // Special-token text kept as tokens and decoded with them gives the text back too (NFC
    // applies between added tokens only, so the whole text's NFC is the same here).
    const auto ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/false), want) << "text " << escape(text);
  }
  EXPECT_GE(checked, corpus().size() - 2);
}

}  // namespace hs::test
