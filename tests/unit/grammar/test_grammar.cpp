// Constrained decoding: the schema check (no model) and xgrammar-backed token grammars over a
// real model vocabulary (SmolLM2's byte-level BPE and Qwen2.5's, from models/): forced valid
// text passes the mask token by token, invalid tokens are masked, random walks through the
// mask always end in JSON the schema accepts, and a finished grammar allows only EOG.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "grammar/grammar_compiler.h"
#include "grammar/schema_support.h"
#include "tokenizer/tokenizer.h"

namespace hs::grammar {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

TEST(SchemaSupport, AcceptsWhatTheGrammarEnforces) {
  const Json s = Json::parse(R"({"type": "object", "title": "t", "description": "d",
    "properties": {"a": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                   "b": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1},
                   "c": {"anyOf": [{"type": "null"}, {"enum": [1, "x"]}]},
                   "d": {"type": "integer", "multipleOf": 3}},
    "required": ["a"], "additionalProperties": false,
    "$defs": {"n": {"type": "number", "minimum": 0, "exclusiveMaximum": 10}}})");
  EXPECT_FALSE(find_unsupported_keyword(s).has_value());
  EXPECT_FALSE(find_unsupported_keyword(Json(true)).has_value());
}

TEST(SchemaSupport, NamesTheFirstUnenforcedKeywordAndWhereItIs) {
  auto p = find_unsupported_keyword(Json::parse(R"({"properties": {"x/y": {"type": "array", "uniqueItems": true}}})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->keyword, "uniqueItems");
  EXPECT_EQ(p->pointer, "/properties/x~1y");
  p = find_unsupported_keyword(Json::parse(R"({"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->keyword, "not");
  EXPECT_EQ(p->pointer, "/anyOf/1");
  p = find_unsupported_keyword(Json::parse(R"({"type": "number", "multipleOf": 0.5})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->keyword, "multipleOf");
  p = find_unsupported_keyword(Json::parse(R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->keyword, "allOf");
  p = find_unsupported_keyword(Json::parse(R"({"items": {"if": {}, "then": {}}})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->pointer, "/items");
  p = find_unsupported_keyword(Json::parse(R"({"properties": {"a": 3}})"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->keyword, "");
  EXPECT_EQ(p->pointer, "/properties/a");
}

const Tokenizer* model_tokenizer(const char* file) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  if (auto it = cache.find(file); it != cache.end()) return it->second.get();
  const fs::path path = fs::path(HS_SOURCE_DIR) / "models" / file;
  if (!fs::exists(path)) return nullptr;
  auto f = gguf::File::open(path.string());
  if (!f.is_ok()) return nullptr;
  auto tok = make_tokenizer(**f);
  if (!tok.is_ok()) return nullptr;
  return (cache[file] = std::move(*tok)).get();
}

class GrammarTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    tok_ = model_tokenizer(GetParam());
    if (!tok_) GTEST_SKIP() << "models/" << GetParam() << " is absent (scripts/setup fetches it)";
    compiler_ = std::make_unique<GrammarCompiler>(*tok_, tok_->n_vocab() + 7);  // padded logits row
  }
  int V() const { return compiler_->n_vocab(); }
  bool allowed(TokenConstraint& c, int32_t t) {
    std::vector<float> row(static_cast<size_t>(V()), 0.0f);
    c.mask(row);
    return std::isfinite(row[static_cast<size_t>(t)]);
  }
  // Random logits, masked, argmax; until the grammar accepts an EOG token (or `limit` steps).
  std::string random_walk(const TokenGrammar& g, uint64_t seed, int limit, bool& ended) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise;
    auto c = g.start();
    std::vector<int32_t> out;
    std::vector<float> row(static_cast<size_t>(V()));
    ended = false;
    for (int step = 0; step < limit; ++step) {
      for (float& x : row) x = noise(rng);
      c->mask(row);
      const int32_t t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      EXPECT_TRUE(std::isfinite(row[static_cast<size_t>(t)]));
      EXPECT_LT(t, tok_->n_vocab()) << "a padding id was allowed";
      EXPECT_TRUE(c->accept(t));
      if (tok_->is_eog(t)) {
        ended = true;
        EXPECT_TRUE(c->terminated());
        break;
      }
      out.push_back(t);
    }
    return tok_->decode(out, false);
  }
  const Tokenizer* tok_ = nullptr;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_P(GrammarTest, ValidTextPassesTheMaskAndThenOnlyEndOfGenerationIsAllowed) {
  auto g = compiler_->json_object();
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto c = (*g)->start();
  const std::vector<int32_t> ids = tok_->encode(R"({"a": [1, 2.5, {"b": null}], "c": "x\"y"})", false, false);
  for (int32_t t : ids) {
    ASSERT_TRUE(allowed(*c, t)) << "token " << t << " '" << tok_->token_to_piece(t) << "' was masked";
    ASSERT_TRUE(c->accept(t));
  }
  std::vector<float> row(static_cast<size_t>(V()), 0.0f);
  c->mask(row);
  for (int32_t t = 0; t < V(); ++t) {
    if (std::isfinite(row[static_cast<size_t>(t)])) {
      EXPECT_TRUE(tok_->is_eog(t)) << "token " << t << " still allowed";
    }
  }
  EXPECT_TRUE(c->accept(tok_->vocab().eog_ids.front()));
  EXPECT_TRUE(c->terminated());
}

TEST_P(GrammarTest, InvalidTokensAreMaskedAndRejected) {
  auto g = compiler_->json_object();
  ASSERT_TRUE(g.is_ok());
  auto c = (*g)->start();
  const int32_t bracket = tok_->encode("]", false, false).front();
  EXPECT_FALSE(allowed(*c, bracket));
  EXPECT_FALSE(c->accept(bracket));
  for (int32_t eog : tok_->vocab().eog_ids) EXPECT_FALSE(allowed(*c, eog)) << "EOG allowed before any JSON";
  std::vector<float> row(static_cast<size_t>(V()), 0.0f);
  c->mask(row);
  for (int32_t t = 0; t < tok_->n_vocab(); ++t) {
    if (tok_->is_control(t)) {
      EXPECT_FALSE(std::isfinite(row[static_cast<size_t>(t)])) << "control token " << t;
    }
  }
}

TEST_P(GrammarTest, RandomWalksThroughASchemaEndInValidJson) {
  const Json schema = Json::parse(R"({"type": "object",
    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 6},
                   "age": {"type": "integer", "minimum": 0, "maximum": 150},
                   "tags": {"type": "array", "items": {"enum": ["red", "blue"]}, "maxItems": 3},
                   "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags", "ok"], "additionalProperties": false})");
  auto g = compiler_->json_schema(schema);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    bool ended = false;
    const std::string text = random_walk(**g, seed, 400, ended);
    ASSERT_TRUE(ended) << "seed " << seed << ": no end after 400 tokens: " << text;
    const Json j = Json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "seed " << seed << ": not JSON: " << text;
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j.size(), 4u) << text;
    ASSERT_TRUE(j["name"].is_string()) << text;
    const size_t n_chars = [&] {  // code points
      size_t n = 0;
      for (unsigned char ch : j["name"].get<std::string>()) n += (ch & 0xC0) != 0x80;
      return n;
    }();
    EXPECT_GE(n_chars, 1u) << text;
    EXPECT_LE(n_chars, 6u) << text;
    ASSERT_TRUE(j["age"].is_number_integer()) << text;
    EXPECT_GE(j["age"].get<int64_t>(), 0);
    EXPECT_LE(j["age"].get<int64_t>(), 150);
    ASSERT_TRUE(j["tags"].is_array()) << text;
    EXPECT_LE(j["tags"].size(), 3u);
    for (const auto& t : j["tags"]) EXPECT_TRUE(t == "red" || t == "blue") << text;
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
  }
}

TEST_P(GrammarTest, StringBoundsAndControlCharactersAreEnforcedOnFedText) {
  auto g = compiler_->json_schema(Json::parse(R"({"type": "object", "properties": {"f": {"type": "string", "maxLength": 12}},
                                                 "required": ["f"], "additionalProperties": false})"));
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto feeds = [&](const std::string& text) {
    auto c = (*g)->start();
    for (int32_t t : tok_->encode(text, false, false))
      if (!c->accept(t)) return false;
    return true;
  };
  EXPECT_TRUE(feeds(R"({"f": "src/main.cpp"})"));             // 12 characters
  EXPECT_FALSE(feeds(R"({"f": "src/engine/engine.cpp"})"));   // 21
  EXPECT_FALSE(feeds("{\"f\": \"a\tb\"}"));                 // a raw tab inside a string is not JSON (no tab token is allowed)
  EXPECT_FALSE(feeds(R"({"f": "x", "g": 1})"));               // additionalProperties false
}

TEST_P(GrammarTest, ToolCallsAreOneOfTheLeadsThenArgumentsThenTheEnd) {
  std::vector<ToolCallAlternative> alts = {
      {"get_weather\", \"arguments\": ",
       Json::parse(R"({"type": "object", "properties": {"city": {"enum": ["Oslo", "Lima"]}}, "required": ["city"],
                      "additionalProperties": false})")},
      {"add\", \"arguments\": ",
       Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
                      "required": ["a"], "additionalProperties": false})")}};
  auto g = compiler_->tool_calls(alts, "}\n</tool_call>");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  int seen_weather = 0, seen_add = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    bool ended = false;
    const std::string text = random_walk(**g, seed, 300, ended);
    ASSERT_TRUE(ended) << text;
    const std::string end = "}\n</tool_call>";
    ASSERT_GE(text.size(), end.size());
    ASSERT_EQ(text.substr(text.size() - end.size()), end) << text;
    const size_t lead = text.find("\", \"arguments\": ");
    ASSERT_NE(lead, std::string::npos) << text;
    const std::string name = text.substr(0, lead);
    const Json args = Json::parse(text.substr(lead + 16, text.size() - end.size() - lead - 16), nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << text;
    if (name == "get_weather") {
      ++seen_weather;
      EXPECT_TRUE(args["city"] == "Oslo" || args["city"] == "Lima") << text;
    } else {
      ASSERT_EQ(name, "add") << text;
      ++seen_add;
      EXPECT_TRUE(args["a"].is_number_integer()) << text;
    }
  }
  EXPECT_EQ(seen_weather + seen_add, 8);
}

TEST_P(GrammarTest, ParallelToolCallsAreOneToMaxCallsEachValid) {
  const std::vector<ToolCallAlternative> alts = {
      {"f\", \"arguments\": ", Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                             "maximum": 9}}, "required": ["n"], "additionalProperties": false})")}};
  const std::string end = "}\n</tool_call>", more = "\n<tool_call>\n{\"name\": \"";
  auto g = compiler_->tool_calls(alts, end, more, 3);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  std::set<size_t> counts;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    bool ended = false;
    const std::string text = "<tool_call>\n{\"name\": \"" + random_walk(**g, seed, 400, ended);
    ASSERT_TRUE(ended) << text;
    size_t n = 0;
    for (size_t at = 0; (at = text.find("<tool_call>\n", at)) != std::string::npos; ++at) {
      const size_t body = at + 12, close = text.find("\n</tool_call>", body);
      ASSERT_NE(close, std::string::npos) << text;
      const Json call = Json::parse(text.substr(body, close - body), nullptr, false);
      ASSERT_FALSE(call.is_discarded()) << text;
      EXPECT_EQ(call["name"], "f");
      EXPECT_TRUE(call["arguments"]["n"].is_number_integer()) << text;
      ++n;
    }
    EXPECT_GE(n, 1u);
    EXPECT_LE(n, 3u) << text;
    counts.insert(n);
  }
  EXPECT_GT(counts.size(), 1u) << "the walks never took a second call";
  EXPECT_FALSE(compiler_->tool_calls(alts, end, more, 0).is_ok());
}

TEST_P(GrammarTest, UnsupportedKeywordsAndBadSchemasAreClearErrors) {
  auto g = compiler_->json_schema(Json::parse(R"({"type": "array", "contains": {"type": "integer"}})"));
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("'contains'"), std::string::npos) << g.status().message();
  g = compiler_->json_schema(Json::parse(R"({"type": "strin"})"));
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  g = compiler_->json_schema(Json::parse(R"({"$ref": "#/$defs/missing"})"));
  EXPECT_FALSE(g.is_ok());
}

INSTANTIATE_TEST_SUITE_P(Models, GrammarTest,
                         ::testing::Values("smollm2-135m-instruct-q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
                         [](const auto& info) { return std::string(info.index == 0 ? "SmolLM2" : "Qwen25"); });

}  // namespace
}  // namespace hs::grammar
