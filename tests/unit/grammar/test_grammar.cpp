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
#include "server/tool_calls.h"
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

// The XML family (Qwen3-Coder / Qwen3.5): after the forced `<tool_call>\n<function=`, a name,
// then `<parameter=KEY>VALUE</parameter>` items held to the schema (in its order, required ones
// present), then the closing tags; what comes out is a call the server's parser reads back.
const Json& xml_schema() {
  static const Json j = Json::parse(R"({"type": "object",
    "properties": {"path": {"enum": ["a.py", "src/b c.py"]}, "mode": {"type": "integer", "minimum": 0, "maximum": 777},
                   "backup": {"type": "boolean"}, "note": {"type": "string", "maxLength": 6},
                   "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
    "required": ["path", "mode"], "additionalProperties": false})");
  return j;
}

// The request's tools array for the parser (it types each parameter by its schema).
Json xml_tools() {
  return Json::array({{{"type", "function"}, {"function", {{"name", "write_file"}, {"parameters", xml_schema()}}}},
                      {{"type", "function"}, {"function", {{"name", "now"}}}}});
}

void expect_xml_arguments_valid(const Json& args, const std::string& text) {
  ASSERT_TRUE(args.is_object()) << text;
  ASSERT_TRUE(args.contains("path") && args.contains("mode")) << args.dump() << "\n" << text;
  EXPECT_TRUE(args["path"] == "a.py" || args["path"] == "src/b c.py") << text;
  ASSERT_TRUE(args["mode"].is_number_integer()) << text;
  EXPECT_GE(args["mode"].get<int64_t>(), 0);
  EXPECT_LE(args["mode"].get<int64_t>(), 777);
  for (const auto& [k, v] : args.items()) {
    EXPECT_TRUE(k == "path" || k == "mode" || k == "backup" || k == "note" || k == "lines") << text;
    if (k == "backup") {
      EXPECT_TRUE(v.is_boolean()) << text;
    }
    if (k == "lines") {
      EXPECT_TRUE(v.is_array() && v.size() <= 2) << text;
    }
  }
}

TEST_P(GrammarTest, XmlToolCallsAreANameThenSchemaParametersThenTheEnd) {
  const std::string end = "</function>\n</tool_call>", more = "\n<tool_call>\n<function=";
  const std::vector<ToolCallAlternative> alts = {
      {"write_file>\n", xml_schema(), ArgumentsStyle::kQwenXml},
      {"now>\n", Json{{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}},
       ArgumentsStyle::kQwenXml}};
  auto g = compiler_->tool_calls(alts, end, more, 2);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const std::vector<std::string> declared = {"write_file", "now"};
  int writes = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    bool ended = false;
    const std::string text = "<tool_call>\n<function=" + random_walk(**g, seed, 400, ended);
    ASSERT_TRUE(ended) << text;
    uint64_t id = 1;
    const Json tools = xml_tools();
    const auto p = server::parse_tool_calls(text, server::ToolCallFormat::kXmlFunction, id, declared, &tools);
    ASSERT_GE(p.calls.size(), 1u) << text;
    ASSERT_LE(p.calls.size(), 2u) << text;
    EXPECT_TRUE(p.content.empty()) << text;
    for (const auto& c : p.calls) {
      const Json args = Json::parse(c.arguments);
      if (c.name == "now") {
        EXPECT_TRUE(args.empty()) << text;
      } else {
        ASSERT_EQ(c.name, "write_file") << text;
        ++writes;
        expect_xml_arguments_valid(args, text);
      }
    }
  }
  EXPECT_GT(writes, 0);
  // Fed text: the template's own rendering passes; a missing required parameter, an undeclared
  // one, a value of the wrong type or another function's name do not.
  auto feeds = [&](const std::string& text, bool& can_end) {
    auto c = (*g)->start();
    for (int32_t t : tok_->encode(text, false, false))
      if (!c->accept(t)) return false;
    can_end = c->accept(tok_->vocab().eog_ids.front());
    return true;
  };
  bool can_end = false;
  EXPECT_TRUE(feeds("write_file>\n<parameter=path>\nsrc/b c.py\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
                    "<parameter=note>\n\tx <y>\n</parameter>\n" + end, can_end));
  EXPECT_TRUE(can_end);
  EXPECT_FALSE(feeds("write_file>\n<parameter=mode>\n420\n</parameter>\n<parameter=path>", can_end))
      << "parameters come in the schema's order";
  EXPECT_TRUE(feeds("write_file>\n<parameter=path>\na.py\n</parameter>\n", can_end));
  EXPECT_FALSE(can_end) << "ended without the required 'mode'";
  EXPECT_FALSE(feeds("write_file>\n<parameter=mode>\nfast\n</parameter>", can_end));
  EXPECT_FALSE(feeds("write_file>\n<parameter=owner>\n", can_end));
  EXPECT_FALSE(feeds("read_file>\n", can_end));
}

// tool_choice auto: free text (tabs included) until the opening tag; from there one declared
// call whose arguments follow its schema, then free text again (or, with at_most_one, the end).
TEST_P(GrammarTest, TriggeredToolCallsLeaveTextFreeAndHoldEachCall) {
  const std::vector<TriggeredToolCall> hermes = {
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
       Json::parse(R"({"type": "object", "properties": {"city": {"enum": ["Oslo", "Lima"]}}, "required": ["city"],
                      "additionalProperties": false})"),
       "}\n</tool_call>"}};
  for (bool at_most_one : {false, true}) {
    auto g = compiler_->triggered_tool_calls(hermes, "<tool_call>", at_most_one);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    auto feeds = [&](const std::string& text) {
      auto c = (*g)->start();
      for (int32_t t : tok_->encode(text, false, true))
        if (!c->accept(t)) return std::unique_ptr<TokenConstraint>();
      return c;
    };
    auto c = feeds("Some text {\"x\": 1}\n\tif (a) { b(); }\n");
    ASSERT_TRUE(c) << "free text was rejected";
    EXPECT_TRUE(c->accept(tok_->vocab().eog_ids.front())) << "free text cannot end";
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}\n</tool_call>";
    EXPECT_TRUE(feeds("Checking.\n" + call)) << call;
    EXPECT_FALSE(feeds("<tool_call>\n{\"name\": \"get_time\""));
    EXPECT_FALSE(feeds("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\""));
    EXPECT_FALSE(feeds("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>")) << "required city";
    auto after = feeds(call);
    ASSERT_TRUE(after);
    if (at_most_one) {
      std::vector<float> row(static_cast<size_t>(V()), 0.0f);
      after->mask(row);
      for (int32_t t = 0; t < V(); ++t) {
        if (std::isfinite(row[static_cast<size_t>(t)])) {
          EXPECT_TRUE(tok_->is_eog(t)) << "token " << t << " after the call";
        }
      }
    } else {
      EXPECT_TRUE(feeds(call + "\n" + call + "\nDone.")) << "a second call and text after it";
    }
  }
  // The XML family under auto: a random walk from the opening tag ends the call validly.
  const std::vector<TriggeredToolCall> xml = {
      {"<tool_call>\n<function=write_file>\n", xml_schema(), "</function>\n</tool_call>", ArgumentsStyle::kQwenXml}};
  auto g = compiler_->triggered_tool_calls(xml, "<tool_call>", true);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto c = (*g)->start();
    std::string text = "I will write it.\n<tool_call>";
    for (int32_t t : tok_->encode(text, false, true)) ASSERT_TRUE(c->accept(t));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise;
    std::vector<float> row(static_cast<size_t>(V()));
    std::vector<int32_t> out;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      for (float& x : row) x = noise(rng);
      c->mask(row);
      const int32_t t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      ASSERT_TRUE(c->accept(t));
      ended = tok_->is_eog(t);
      if (!ended) out.push_back(t);
    }
    text += tok_->decode(out, false);
    ASSERT_TRUE(ended) << text;
    uint64_t id = 1;
    const Json tools = xml_tools();
    const auto p = server::parse_tool_calls(text, server::ToolCallFormat::kXmlFunction, id, {"write_file"}, &tools);
    ASSERT_EQ(p.calls.size(), 1u) << text;
    EXPECT_EQ(p.content, "I will write it.");
    expect_xml_arguments_valid(Json::parse(p.calls[0].arguments), text);
  }
  EXPECT_FALSE(compiler_->triggered_tool_calls(xml, "<function=", false).is_ok()) << "begin must start with the trigger";
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
