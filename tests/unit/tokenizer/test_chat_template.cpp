// tests/unit/tokenizer/test_chat_template.cpp — ChatTemplate against transformers.
//
// tests/fixtures/chat/expected.json was written by tools/reference/gen_chat_templates.py,
// which renders every (template, conversation) pair of conversations.json with transformers'
// own apply_chat_template code path. Each pair must render byte-identically here; pairs the
// template rejects must fail, with the template's own message for raise_exception.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "tokenizer/chat_template.h"

namespace hs {
namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const Json& conversations() {
  static const Json j = Json::parse(read_file(std::string(HS_FIXTURES_DIR) + "/chat/conversations.json"));
  return j;
}

const Json& expected() {
  static const Json j = Json::parse(read_file(std::string(HS_FIXTURES_DIR) + "/chat/expected.json"));
  return j;
}

ChatTemplateInputs inputs_for(const Json& tinfo, const Json& conv) {
  ChatTemplateInputs in;
  in.messages = conv["messages"];
  in.add_generation_prompt = conv.value("add_generation_prompt", false);
  in.bos_token = tinfo["bos_token"].get<std::string>();
  in.eos_token = tinfo["eos_token"].get<std::string>();
  in.extra = conversations().value("common_extra", Json::object());
  if (conv.contains("extra")) {
    for (const auto& [k, v] : conv["extra"].items()) in.extra[k] = v;
  }
  return in;
}

class ChatTemplateFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixtureTest, RendersLikeTransformers) {
  const std::string name = GetParam();
  const Json& tinfo = conversations()["templates"][name];
  std::string source = read_file(std::string(HS_FIXTURES_DIR) + "/chat/" + tinfo["file"].get<std::string>());
  ASSERT_FALSE(source.empty());
  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  const Json& results = expected()["results"][name];
  const Json& convs = conversations()["conversations"];
  ASSERT_EQ(results.size(), convs.size()) << "expected.json is stale: re-run tools/reference/gen_chat_templates.py";
  for (size_t i = 0; i < convs.size(); ++i) {
    const Json& want = results[i];
    ASSERT_EQ(want["conversation"], convs[i]["name"]);
    SCOPED_TRACE(name + " / " + want["conversation"].get<std::string>());
    auto got = tmpl->render(inputs_for(tinfo, convs[i]));
    if (want.contains("output")) {
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(got.value(), want["output"].get<std::string>());
    } else {
      ASSERT_FALSE(got.is_ok()) << "expected an error, rendered:\n" << got.value();
      if (want["error_type"] == "TemplateError") {  // raise_exception: the template's own text
        EXPECT_NE(got.status().message().find(want["error"].get<std::string>()), std::string::npos)
            << got.status().message();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatTemplateFixtureTest,
                         ::testing::Values("smollm2", "gemma3", "chatml", "chatml_blocks", "llama3_1", "llama3_2",
                                           "qwen2_5", "qwen3", "qwen2_5_coder_1_5b", "qwen3_5", "qwen3_coder"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ChatTemplateTest, FixtureCoversEveryTemplate) {
  EXPECT_EQ(conversations()["templates"].size(), 11u);
  EXPECT_GE(conversations()["conversations"].size(), 8u);
  for (const auto& [name, _] : conversations()["templates"].items()) {
    EXPECT_TRUE(expected()["results"].contains(name)) << name;
  }
}

// The Qwen2.5-Coder files carry the fixtures' templates byte for byte (the 0.5B the Qwen2.5
// one, the 1.5B a variant with literal "{{" in a string), so the renders above are theirs.
TEST(ChatTemplateTest, Qwen25CoderFilesCarryTheFixtureTemplates) {
  const std::pair<const char*, const char*> files[] = {
      {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2_5"},
      {"qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2_5_coder_1_5b"}};
  int checked = 0;
  for (const auto& [file, name] : files) {
    const std::string path = std::string(HS_SOURCE_DIR) + "/models/" + file;
    if (!std::filesystem::exists(path)) continue;
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    auto tmpl = (*f)->get_string("tokenizer.chat_template");
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
    const Json& tinfo = conversations()["templates"][name];
    EXPECT_EQ(std::string(tmpl.value()), read_file(std::string(HS_FIXTURES_DIR) + "/chat/" + tinfo["file"].get<std::string>()))
        << file;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no Qwen2.5-Coder model under models/ (scripts/setup fetches the 0.5B)";
}

TEST(ChatTemplateTest, Gemma3BuiltinIsTheOfficialTemplate) {
  std::string fixture = read_file(std::string(HS_FIXTURES_DIR) + "/chat/templates/gemma3.jinja");
  EXPECT_EQ(builtin_chat_template("gemma3"), fixture);
  EXPECT_TRUE(builtin_chat_template("llama").empty());
  EXPECT_TRUE(builtin_chat_template("").empty());

  auto t = ChatTemplate::parse(builtin_chat_template("gemma3"));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "system", "content": "Be kind."}, {"role": "user", "content": " Hi "}])");
  in.add_generation_prompt = true;
  in.bos_token = "<bos>";
  auto out = t->render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), "<bos><start_of_turn>user\nBe kind.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplateTest, RaiseExceptionBecomesInvalidArgument) {
  auto t = ChatTemplate::parse(builtin_chat_template("gemma3"));
  ASSERT_TRUE(t.is_ok());
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "assistant", "content": "first"}])");
  auto out = t->render(in);
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplateTest, RejectsBadInputs) {
  auto t = ChatTemplate::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  ChatTemplateInputs in;
  in.messages = Json::array();
  EXPECT_FALSE(t->render(in).is_ok());  // transformers refuses empty conversations too
  in.messages = Json::object();
  EXPECT_FALSE(t->render(in).is_ok());
  in.messages = Json::parse(R"(["not an object"])");
  EXPECT_FALSE(t->render(in).is_ok());
  in.messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  in.extra = Json::array();
  EXPECT_FALSE(t->render(in).is_ok());
  ChatTemplate unparsed;
  EXPECT_FALSE(unparsed.render(in).is_ok());

  // Deeply nested request JSON is refused, not a stack overflow.
  std::string deep = std::string(20000, '[') + std::string(20000, ']');
  in.extra = Json::object();
  in.messages = Json::array({Json{{"role", "user"}, {"content", Json::parse(deep)}}});
  auto r = t->render(in);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos) << r.status().message();
}

TEST(ChatTemplateTest, ParseErrorsNameTheConstruct) {
  auto t = ChatTemplate::parse("{% for m in messages %}\n{% include 'x' %}{% endfor %}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(t.status().message().find("'{% include %}' at line 2"), std::string::npos) << t.status().message();
}

TEST(ChatTemplateTest, ExposesVariablesLikeTransformers) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ custom }}|"
      "{% for m in messages %}{{ m|list }}{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "assistant", "content": "a", "reasoning": "r", "name": null}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = Json::parse(R"({"custom": 7, "eos_token": "<override>"})");
  auto out = t->render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  // Null keys dropped; reasoning aliased to `thinking` (first) and `reasoning_content` (last).
  EXPECT_EQ(out.value(),
            "<s>|<override>|None|None|False|7|['thinking', 'role', 'content', 'reasoning', 'reasoning_content']");
}

TEST(ChatTemplateTest, CopiesShareTheParsedTemplate) {
  auto t = ChatTemplate::parse("{% for m in messages %}[{{ m.role }}]{% endfor %}");
  ASSERT_TRUE(t.is_ok());
  ChatTemplate a = t.value();
  ChatTemplate b = a;
  ChatTemplate c = std::move(a);
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])");
  EXPECT_EQ(b.render(in).value(), "[user][assistant]");
  EXPECT_EQ(c.render(in).value(), "[user][assistant]");
  EXPECT_EQ(&b.source(), &c.source());
}

// The server renders one parsed template from many request threads at once.
TEST(ChatTemplateTest, ConcurrentRendersAgree) {
  const Json& tinfo = conversations()["templates"]["qwen3"];
  auto t = ChatTemplate::parse(read_file(std::string(HS_FIXTURES_DIR) + "/chat/" + tinfo["file"].get<std::string>()));
  ASSERT_TRUE(t.is_ok());
  const ChatTemplate shared = t.value();
  const Json& convs = conversations()["conversations"];
  const Json& want = expected()["results"]["qwen3"];
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        size_t i = static_cast<size_t>(w + round) % convs.size();
        auto got = shared.render(inputs_for(tinfo, convs[i]));
        bool ok = want[i].contains("output") ? (got.is_ok() && got.value() == want[i]["output"].get<std::string>())
                                             : !got.is_ok();
        if (!ok) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace hs
