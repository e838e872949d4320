// tests/unit/server/test_tool_calls.cpp — tools / tool_choice validation and the Hermes
// tool-call parser (server/tool_calls.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/tool_calls.h"

namespace hs::server {
namespace {

Json weather_tools() {
  return Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])");
}

TEST(ToolsRequest, DefaultsAndChoices) {
  ToolsRequest r;
  ASSERT_FALSE(parse_tools_request(Json::object(), r));
  EXPECT_FALSE(r.active());
  Json body{{"tools", weather_tools()}};
  ASSERT_FALSE(parse_tools_request(body, r));
  EXPECT_TRUE(r.active());
  EXPECT_EQ(r.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.parallel);
  body["tool_choice"] = "none";
  ASSERT_FALSE(parse_tools_request(body, r));
  EXPECT_FALSE(r.active());
  body["tool_choice"] = "required";
  ASSERT_FALSE(parse_tools_request(body, r));
  EXPECT_EQ(r.choice, ToolChoice::kRequired);
  body["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "get_time"}})");
  body["parallel_tool_calls"] = false;
  ASSERT_FALSE(parse_tools_request(body, r));
  EXPECT_EQ(r.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.named, "get_time");
  EXPECT_FALSE(r.parallel);
}

TEST(ToolsRequest, BadDefinitionsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"tools": {}})", "tools"},
      {R"({"tools": [1]})", "tools[0]"},
      {R"({"tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {R"({"tools": [{"type": "function"}]})", "tools[0].function"},
      {R"({"tools": [{"type": "function", "function": {"name": "has space"}}]})", "tools[0].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]})",
       "tools[0].function.parameters"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "always"})", "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice"},
      {R"({"tool_choice": "required"})", "tool_choice"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "parallel_tool_calls": 1})", "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    ToolsRequest r;
    const MaybeError e = parse_tools_request(Json::parse(c.body), r);
    ASSERT_TRUE(e) << c.body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, c.param) << c.body << ": " << e->message;
  }
}

TEST(ToolCallParser, HermesBlocks) {
  uint64_t id = 1;
  EXPECT_EQ(tool_call_format_of("{% if tools %}<tool_call>{% endif %}"), ToolCallFormat::kHermes);
  EXPECT_EQ(tool_call_format_of("{{ messages }}"), ToolCallFormat::kNone);
  auto p = parse_tool_calls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>",
      ToolCallFormat::kHermes, id);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(Json::parse(p.calls[1].arguments), Json::parse(R"({"tz": "CET"})"));
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  EXPECT_EQ(p.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(p.content, "");

  // Text around a call is the content; an unclosed final block is parsed to the end.
  p = parse_tool_calls("Let me check.\n<tool_call>\n{\"name\": \"get_time\"}", ToolCallFormat::kHermes, id);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.content, "Let me check.");
}

TEST(ToolCallParser, MalformedBlocksStayContent) {
  uint64_t id = 1;
  for (const char* text : {"<tool_call>\nnot json\n</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                           "<tool_call>{\"name\": 3}</tool_call>", "<tool_call>[1, 2]</tool_call>",
                           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "plain text, no calls"}) {
    const auto p = parse_tool_calls(text, ToolCallFormat::kHermes, id);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  const auto none = parse_tool_calls("<tool_call>{\"name\": \"f\"}</tool_call>", ToolCallFormat::kNone, id);
  EXPECT_TRUE(none.calls.empty());
}

TEST(ToolCallParser, BareCallObjectsNamingDeclaredFunctions) {
  uint64_t id = 1;
  const std::vector<std::string> declared = {"get_weather", "get_time"};
  auto p = parse_tool_calls("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", ToolCallFormat::kHermes, id,
                            declared);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  p = parse_tool_calls("```json\n[{\"name\": \"get_time\"}, {\"name\": \"get_weather\", \"arguments\": {}}]\n```",
                       ToolCallFormat::kHermes, id, declared);
  ASSERT_EQ(p.calls.size(), 2u);
  p = parse_tool_calls("{\"name\": \"get_time\"}\n{\"name\": \"get_weather\"}\n", ToolCallFormat::kHermes, id, declared);
  ASSERT_EQ(p.calls.size(), 2u);
  // An undeclared name, or JSON that is not only calls, stays content.
  for (const char* text : {"{\"name\": \"rm_rf\", \"arguments\": {}}", "{\"city\": \"Paris\"}",
                           "{\"name\": \"get_time\"} and more", "The answer is {\"name\": \"get_time\"}"}) {
    p = parse_tool_calls(text, ToolCallFormat::kHermes, id, declared);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  EXPECT_TRUE(may_be_bare_call("  {\"na"));
  EXPECT_TRUE(may_be_bare_call("``"));
  EXPECT_TRUE(may_be_bare_call(""));
  EXPECT_FALSE(may_be_bare_call("The weather"));
}

TEST(ToolCallParser, XmlFunctionBlocks) {
  uint64_t id = 1;
  EXPECT_EQ(tool_call_format_of("<tool_call>\n<function={{ name }}>"), ToolCallFormat::kXmlFunction);
  auto p = parse_tool_calls(
      "I will look.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.cpp\n</parameter>\n"
      "<parameter=lines>\n[1, 40]\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=grep>\n"
      "<parameter=pattern>\nTODO: \"x\"\n</parameter>\n</function>\n</tool_call>",
      ToolCallFormat::kXmlFunction, id);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "I will look.");
  EXPECT_EQ(p.calls[0].name, "read_file");
  EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"path": "src/main.cpp", "lines": [1, 40]})"));
  EXPECT_EQ(Json::parse(p.calls[1].arguments), Json::parse(R"({"pattern": "TODO: \"x\""})"));
  // No parameters; and malformed blocks stay content.
  p = parse_tool_calls("<tool_call>\n<function=now>\n</function>\n</tool_call>", ToolCallFormat::kXmlFunction, id);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{}");
  for (const char* bad : {"<tool_call>\n<function=f>\n<parameter=a>\nunclosed\n</function>\n</tool_call>",
                          "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>\n<function=>\n</tool_call>"}) {
    p = parse_tool_calls(bad, ToolCallFormat::kXmlFunction, id);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

// Parameters are typed by the tool's schema: strings stay strings whatever they look like, and
// the Python spellings the templates write (`| string`: True, None) read back as JSON.
TEST(ToolCallParser, XmlParametersAreTypedByTheSchema) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
                   "opt": {"type": ["string", "null"]}, "unit": {"enum": ["C", "F"]}, "x": {"anyOf": [{"type": "number"}, {"type": "null"}]},
                   "code": {"type": "string"}}}}}])");
  uint64_t id = 1;
  auto call = [&](const std::string& params, const Json* t) {
    const auto p = parse_tool_calls("<tool_call>\n<function=f>\n" + params + "</function>\n</tool_call>",
                                    ToolCallFormat::kXmlFunction, id, {"f"}, t);
    EXPECT_EQ(p.calls.size(), 1u) << params;
    return p.calls.empty() ? Json() : Json::parse(p.calls[0].arguments);
  };
  const std::string params =
      "<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n 42 \n</parameter>\n<parameter=ok>\nTrue\n</parameter>\n"
      "<parameter=opt>\nNone\n</parameter>\n<parameter=unit>\n  F \n</parameter>\n<parameter=x>\nnull\n</parameter>\n"
      "<parameter=code>\n  if x:\n\treturn \"y\"\n\n</parameter>\n";
  EXPECT_EQ(call(params, &tools), Json::parse(R"({"zip": "01234", "n": 42, "ok": true, "opt": null, "unit": "F",
                                                 "x": null, "code": "  if x:\n\treturn \"y\"\n"})"));
  // Without the definitions: JSON where the text is JSON, Python literals, else the text.
  EXPECT_EQ(call("<parameter=zip>\n1234\n</parameter>\n<parameter=ok>\nFalse\n</parameter>\n"
                 "<parameter=s>\nplain text\n</parameter>\n<parameter=q>\n\"quoted\"\n</parameter>\n", nullptr),
            Json::parse(R"({"zip": 1234, "ok": false, "s": "plain text", "q": "\"quoted\""})"));
  // A string parameter written "null" is the text (its schema does not allow null).
  EXPECT_EQ(call("<parameter=zip>\nnull\n</parameter>\n", &tools), Json::parse(R"({"zip": "null"})"));
  // A parameter given twice is not a call.
  const std::string twice = "<tool_call>\n<function=f>\n<parameter=n>\n1\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
                            "</function>\n</tool_call>";
  const auto p = parse_tool_calls(twice, ToolCallFormat::kXmlFunction, id, {"f"}, &tools);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, twice);
}

// The Qwen3.5 / Qwen3-Coder templates' own rendering of an agent's calls (the transformers
// fixture) parses back into the calls that were rendered, arguments of every JSON type included.
TEST(ToolCallParser, XmlTemplateRenderingsParseBackIntoTheirCalls) {
  auto read = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return Json::parse(ss.str());
  };
  const Json convs = read(std::string(HS_FIXTURES_DIR) + "/chat/conversations.json");
  const Json expected = read(std::string(HS_FIXTURES_DIR) + "/chat/expected.json");
  const Json* conv = nullptr;
  size_t index = 0;
  for (size_t i = 0; i < convs["conversations"].size(); ++i)
    if (convs["conversations"][i]["name"] == "tools_agent_steps_argument_types") conv = &convs["conversations"][index = i];
  ASSERT_NE(conv, nullptr);
  std::vector<Json> want;  // every call's arguments, in order
  for (const auto& m : (*conv)["messages"])
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"]) want.push_back(c["function"]["arguments"]);
  const Json& tools = (*conv)["extra"]["tools"];
  for (const char* tmpl : {"qwen3_5", "qwen3_coder"}) {
    SCOPED_TRACE(tmpl);
    const std::string rendered = expected["results"][tmpl][index]["output"].get<std::string>();
    ASSERT_EQ(tool_call_format_of(rendered), ToolCallFormat::kXmlFunction);
    uint64_t id = 1;
    // Each assistant turn: from after "<|im_start|>assistant\n" to its "<|im_end|>".
    std::vector<Json> got;
    for (size_t at = 0; (at = rendered.find("<|im_start|>assistant\n", at)) != std::string::npos;) {
      at += 22;
      const size_t end = rendered.find("<|im_end|>", at);
      if (end == std::string::npos) break;  // the generation prompt
      const auto p = parse_tool_calls(std::string_view(rendered).substr(at, end - at), ToolCallFormat::kXmlFunction, id,
                                      {"write_file", "run_tests"}, &tools);
      for (const auto& c : p.calls) got.push_back(Json::parse(c.arguments));
      EXPECT_EQ(p.content.find("<tool_call>"), std::string::npos) << p.content;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  }
}

TEST(ToolCallParser, Llama3JsonCalls) {
  uint64_t id = 1;
  EXPECT_EQ(tool_call_format_of("{{- '<|python_tag|>' }} {\"name\": ..., \"parameters\": ...}"), ToolCallFormat::kJson);
  const std::vector<std::string> declared = {"get_weather"};
  auto p = parse_tool_calls("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", ToolCallFormat::kJson,
                            id, declared);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  p = parse_tool_calls("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {}}", ToolCallFormat::kJson, id, declared);
  ASSERT_EQ(p.calls.size(), 1u);
  for (const char* text : {"It is sunny.", "{\"name\": \"other\", \"parameters\": {}}"}) {
    p = parse_tool_calls(text, ToolCallFormat::kJson, id, declared);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

// tool_choice required / named: the forced opening plus what a model writes after it parses as
// the call, in every format.
TEST(ToolCallPrefix, ForcedOpeningPlusContinuationParses) {
  const std::vector<std::string> declared = {"get_weather", "get_time"};
  struct Case {
    ToolCallFormat f;
    std::string name, continuation;
  };
  const Case cases[] = {
      {ToolCallFormat::kHermes, "get_time", "\"zone\": \"UTC\"}}\n</tool_call>"},
      {ToolCallFormat::kHermes, "", "get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"},
      {ToolCallFormat::kXmlFunction, "get_time", "<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kXmlFunction, "", "get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kJson, "get_time", "\"zone\": \"UTC\"}}"},
      {ToolCallFormat::kJson, "", "get_time\", \"parameters\": {\"zone\": \"UTC\"}}"},
  };
  for (const Case& c : cases) {
    uint64_t id = 1;
    const std::string prefix = tool_call_prefix(c.f, c.name);
    ASSERT_FALSE(prefix.empty());
    if (!c.name.empty()) {
      EXPECT_NE(prefix.find(c.name), std::string::npos) << prefix;
    }
    const auto p = parse_tool_calls(prefix + c.continuation, c.f, id, declared);
    ASSERT_EQ(p.calls.size(), 1u) << prefix + c.continuation;
    EXPECT_EQ(p.calls[0].name, "get_time");
    EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"zone": "UTC"})")) << p.calls[0].arguments;
    EXPECT_TRUE(p.content.empty()) << p.content;
  }
  EXPECT_EQ(tool_call_prefix(ToolCallFormat::kNone, "x"), "");
}

// The grammar's pieces (forced: prefix, lead, arguments, end; auto: begin, arguments, end) put
// together with arguments in the format's own form parse as the call, in every format.
TEST(ToolCallGrammarPieces, ForcedAndAutoPiecesAroundArgumentsParse) {
  ToolsRequest tr;
  Json body{{"tools", weather_tools()}, {"tool_choice", "required"}};
  ASSERT_FALSE(parse_tools_request(body, tr));
  const std::vector<std::string> declared = {"get_weather", "get_time"};
  const std::pair<ToolCallFormat, std::string> formats[] = {
      {ToolCallFormat::kHermes, "{\"city\": \"Oslo\"}"},
      {ToolCallFormat::kJson, "{\"city\": \"Oslo\"}"},
      {ToolCallFormat::kXmlFunction, "<parameter=city>\nOslo\n</parameter>\n"}};
  for (const auto& [f, args] : formats) {
    SCOPED_TRACE(static_cast<int>(f));
    for (const char* choice : {"required", "named"}) {
      if (std::string(choice) == "named") {
        body["tool_choice"] = Json::parse(R"({"type": "function", "function": {"name": "get_weather"}})");
      } else {
        body["tool_choice"] = "required";
      }
      ASSERT_FALSE(parse_tools_request(body, tr));
      const auto fc = forced_tool_call(f, tr);
      ASSERT_TRUE(fc.has_value());
      EXPECT_EQ(fc->xml, f == ToolCallFormat::kXmlFunction);
      ASSERT_EQ(fc->alternatives.size(), std::string(choice) == "named" ? 1u : 2u);
      EXPECT_EQ(fc->alternatives[0].second["required"], Json::array({"city"}));
      if (fc->alternatives.size() == 2) {
        EXPECT_EQ(fc->alternatives.back().second, Json::parse(R"({"type": "object"})")) << "a tool without parameters";
      }
      EXPECT_EQ(fc->max_calls, std::string(choice) == "named" ? 1 : kMaxForcedCalls);
      uint64_t id = 1;
      const std::string text = fc->prefix + fc->alternatives[0].first + args + fc->end;
      const auto p = parse_tool_calls(text, f, id, declared, &tr.tools);
      ASSERT_EQ(p.calls.size(), 1u) << text;
      EXPECT_EQ(p.calls[0].name, "get_weather");
      EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"city": "Oslo"})"));
    }
    body["tool_choice"] = "auto";
    body["parallel_tool_calls"] = false;
    ASSERT_FALSE(parse_tools_request(body, tr));
    const auto a = auto_tool_calls(f, tr);
    if (f == ToolCallFormat::kJson) {
      EXPECT_FALSE(a.has_value()) << "no opening tag to trigger on";
    } else {
      ASSERT_TRUE(a.has_value());
      EXPECT_TRUE(a->at_most_one);
      ASSERT_EQ(a->calls.size(), 2u);
      for (const auto& c : a->calls) EXPECT_TRUE(c.begin.starts_with(a->trigger)) << c.begin;
      uint64_t id = 1;
      const std::string text = "Let me check.\n" + a->calls[0].begin + args + a->calls[0].end;
      const auto p = parse_tool_calls(text, f, id, declared, &tr.tools);
      ASSERT_EQ(p.calls.size(), 1u) << text;
      EXPECT_EQ(p.content, "Let me check.");
      EXPECT_EQ(Json::parse(p.calls[0].arguments), Json::parse(R"({"city": "Oslo"})"));
    }
    body.erase("parallel_tool_calls");
  }
}

TEST(ToolCallParser, StreamHoldBack) {
  EXPECT_EQ(tool_call_open_prefix("Hello <tool", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(tool_call_open_prefix("Hello <", ToolCallFormat::kHermes), 1u);
  EXPECT_EQ(tool_call_open_prefix("Hello", ToolCallFormat::kHermes), 0u);
  EXPECT_EQ(tool_call_open_prefix("a <tool_call", ToolCallFormat::kHermes), 10u);
  EXPECT_EQ(find_tool_call_open("ab<tool_call>{", ToolCallFormat::kHermes), 2u);
  EXPECT_EQ(find_tool_call_open("ab<tool_call", ToolCallFormat::kHermes), std::string_view::npos);
}

}  // namespace
}  // namespace hs::server
