// tests/unit/server/test_anthropic_protocol.cpp — Anthropic's Messages API: request
// conversion into the OpenAI-shaped chat request (system, content blocks, tool_use /
// tool_result order, tool_choice mapping, prefill, every 400 naming its field), the Message
// object, the stream events, error bodies, and the HTTP layer's x-api-key auth and
// Anthropic-shaped errors on /v1/messages (a server without a model).
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "server/anthropic_protocol.h"
#include "server/http_server.h"

namespace hs::server {
namespace {

Json user(Json content) { return Json{{"role", "user"}, {"content", std::move(content)}}; }
Json assistant(Json content) { return Json{{"role", "assistant"}, {"content", std::move(content)}}; }

Json body(Json extra = Json::object()) {
  Json b = {{"model", "m"}, {"max_tokens", 32}, {"messages", Json::array({user("Hi")})}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

const Json kWeather = {
    {"name", "get_weather"},
    {"description", "Weather of a city"},
    {"input_schema",
     {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", Json::array({"city"})}}}};

MessagesRequest parse_ok(const Json& b, MessagesEndpoint ep = MessagesEndpoint::kCreate) {
  MessagesRequest r;
  auto e = parse_messages_request(b, ep, r);
  EXPECT_FALSE(e) << (e ? e->param + ": " + e->message : "");
  return r;
}

// The 400 for `b`, with its param.
ApiError parse_err(const Json& b, MessagesEndpoint ep = MessagesEndpoint::kCreate) {
  MessagesRequest r;
  auto e = parse_messages_request(b, ep, r);
  EXPECT_TRUE(e) << b.dump();
  if (!e) return ApiError{};
  EXPECT_EQ(e->status, 400) << e->message;
  EXPECT_EQ(e->type, "invalid_request_error");
  return *e;
}

// ---- request conversion ----

TEST(AnthropicRequest, PlainMessageAndGenerationFields) {
  MessagesRequest r = parse_ok(body({{"temperature", 0.5},
                                     {"top_p", 0.9},
                                     {"top_k", 40},
                                     {"stream", true},
                                     {"stop_sequences", Json::array({"\n\n", "END"})},
                                     {"metadata", {{"user_id", "u-1"}}},
                                     {"service_tier", "auto"}}));
  EXPECT_EQ(r.chat.gen.model, "m");
  EXPECT_EQ(r.chat.gen.max_tokens, 32);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.chat.gen.sampling.top_k, 40);
  EXPECT_TRUE(r.chat.gen.stream);
  EXPECT_EQ(r.chat.gen.n, 1);
  EXPECT_EQ(r.chat.gen.stop, (std::vector<std::string>{"\n\n", "END"}));
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0], (Json{{"role", "user"}, {"content", "Hi"}}));
  EXPECT_TRUE(r.chat.assistant_prefill.empty());
  EXPECT_FALSE(r.tools.active());
}

TEST(AnthropicRequest, SystemStringAndBlocks) {
  MessagesRequest r = parse_ok(body({{"system", "Be brief."}}));
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0], (Json{{"role", "system"}, {"content", "Be brief."}}));
  r = parse_ok(
      body({{"system", Json::array({{{"type", "text"}, {"text", "A"}},
                                    {{"type", "text"}, {"text", "B"}, {"cache_control", {{"type", "ephemeral"}}}}})}}));
  EXPECT_EQ(r.chat.messages[0], (Json{{"role", "system"}, {"content", "A\nB"}}));
  r = parse_ok(body({{"system", Json::array()}}));
  EXPECT_EQ(r.chat.messages.size(), 1u);
}

TEST(AnthropicRequest, TextBlocksJoin) {
  MessagesRequest r =
      parse_ok(body({{"messages", Json::array({user(Json::array({{{"type", "text"}, {"text", "one"}},
                                                                 {{"type", "text"}, {"text", "two"}}}))})}}));
  EXPECT_EQ(r.chat.messages[0]["content"], "one\ntwo");
}

TEST(AnthropicRequest, ToolUseAndToolResultInOrder) {
  Json msgs = Json::array(
      {user("Weather in Paris?"),
       assistant(Json::array(
           {{{"type", "text"}, {"text", "Let me check."}},
            {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}},
            {{"type", "tool_use"}, {"id", "toolu_2"}, {"name", "get_weather"}, {"input", {{"city", "Lyon"}}}}})),
       user(Json::array({{{"type", "text"}, {"text", "before"}},
                         {{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "18C"}},
                         {{"type", "tool_result"},
                          {"tool_use_id", "toolu_2"},
                          {"content", Json::array({{{"type", "text"}, {"text", "down"}}})},
                          {"is_error", true}},
                         {{"type", "text"}, {"text", "after"}}}))});
  MessagesRequest r = parse_ok(body({{"messages", msgs}, {"tools", Json::array({kWeather})}}));
  const Json& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0]["role"], "user");
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], "Let me check.");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  // parse_chat_request gives the template the arguments as an object (from the JSON string).
  EXPECT_EQ(m[1]["tool_calls"][1]["function"]["arguments"], (Json{{"city", "Lyon"}}));
  EXPECT_EQ(m[2], (Json{{"role", "user"}, {"content", "before"}}));
  EXPECT_EQ(m[3], (Json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18C"}}));
  EXPECT_EQ(m[4], (Json{{"role", "tool"}, {"tool_call_id", "toolu_2"}, {"content", "Error: down"}}));
  EXPECT_EQ(m[5], (Json{{"role", "user"}, {"content", "after"}}));
}

TEST(AnthropicRequest, OpenAiBodyHasTheFunctionTools) {
  Json openai;
  std::string prefill;
  ASSERT_FALSE(
      anthropic_to_openai_body(body({{"tools", Json::array({kWeather})}}), MessagesEndpoint::kCreate, openai, prefill));
  ASSERT_EQ(openai["tools"].size(), 1u);
  const Json& t = openai["tools"][0];
  EXPECT_EQ(t["type"], "function");
  EXPECT_EQ(t["function"]["name"], "get_weather");
  EXPECT_EQ(t["function"]["description"], "Weather of a city");
  EXPECT_EQ(t["function"]["parameters"], kWeather["input_schema"]);
  EXPECT_FALSE(openai.contains("tool_choice"));
}

TEST(AnthropicRequest, ToolChoiceMapping) {
  Json tools = Json::array({kWeather, {{"name", "get_time"}, {"input_schema", {{"type", "object"}}}}});
  MessagesRequest r = parse_ok(body({{"tools", tools}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_TRUE(r.tools.parallel);
  EXPECT_EQ(r.tools.names, (std::vector<std::string>{"get_weather", "get_time"}));
  r = parse_ok(body({{"tools", tools}, {"tool_choice", {{"type", "auto"}, {"disable_parallel_tool_use", true}}}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_FALSE(r.tools.parallel);
  r = parse_ok(body({{"tools", tools}, {"tool_choice", {{"type", "any"}}}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  r = parse_ok(body({{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "get_time"}}}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "get_time");
  r = parse_ok(body({{"tools", tools}, {"tool_choice", {{"type", "none"}}}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNone);
  EXPECT_FALSE(r.tools.active());
}

TEST(AnthropicRequest, FinalAssistantMessageIsThePrefill) {
  MessagesRequest r = parse_ok(body({{"messages", Json::array({user("Pick A or B"), assistant("The answer is (")})}}));
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.assistant_prefill, "The answer is (");
  r = parse_ok(
      body({{"messages", Json::array({user("x"), assistant(Json::array({{{"type", "text"}, {"text", "{"}}}))})}}));
  EXPECT_EQ(r.chat.assistant_prefill, "{");
  // An earlier assistant message stays a message.
  r = parse_ok(body({{"messages", Json::array({user("a"), assistant("b"), user("c")})}}));
  EXPECT_EQ(r.chat.messages.size(), 3u);
  EXPECT_TRUE(r.chat.assistant_prefill.empty());
}

TEST(AnthropicRequest, CountTokensTakesNoMaxTokens) {
  Json b = {{"model", "m"}, {"messages", Json::array({user("Hi")})}, {"system", "S"}};
  MessagesRequest r = parse_ok(b, MessagesEndpoint::kCountTokens);
  EXPECT_EQ(r.chat.messages.size(), 2u);
  b["max_tokens"] = 5;
  EXPECT_EQ(parse_err(b, MessagesEndpoint::kCountTokens).param, "max_tokens");
}

TEST(AnthropicRequest, AcceptedMarkers) {
  // cache_control (top level, blocks, tools), thinking disabled, service_tier standard_only,
  // empty citations, metadata without user_id.
  Json tool = kWeather;
  tool["cache_control"] = {{"type", "ephemeral"}, {"ttl", "1h"}};
  tool["type"] = "custom";
  tool["strict"] = false;
  parse_ok(body({{"cache_control", {{"type", "ephemeral"}}},
                 {"thinking", {{"type", "disabled"}}},
                 {"service_tier", "standard_only"},
                 {"metadata", Json::object()},
                 {"tools", Json::array({tool})},
                 {"messages", Json::array({user(Json::array({{{"type", "text"},
                                                              {"text", "x"},
                                                              {"citations", Json::array()},
                                                              {"cache_control", {{"type", "ephemeral"}}}}}))})}}));
}

struct BadCase {
  const char* name;
  Json body;
  const char* param;
};

TEST(AnthropicRequest, EveryBadRequestNamesItsField) {
  const Json tools = Json::array({kWeather});
  const Json call = {{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "P"}}}};
  const Json image = {{"type", "image"},
                      {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AA=="}}}};
  Json no_max = body();
  no_max.erase("max_tokens");
  Json no_messages = body();
  no_messages.erase("messages");
  const std::vector<BadCase> cases = {
      {"missing max_tokens", no_max, "max_tokens"},
      {"max_tokens 0", body({{"max_tokens", 0}}), "max_tokens"},
      {"max_tokens string", body({{"max_tokens", "8"}}), "max_tokens"},
      {"missing messages", no_messages, "messages"},
      {"empty messages", body({{"messages", Json::array()}}), "messages"},
      {"messages object", body({{"messages", Json::object()}}), "messages"},
      {"message not object", body({{"messages", Json::array({"hi"})}}), "messages[0]"},
      {"unknown role", body({{"messages", Json::array({{{"role", "robot"}, {"content", "x"}}})}}), "messages[0].role"},
      {"system role", body({{"messages", Json::array({{{"role", "system"}, {"content", "x"}}})}}), "messages[0].role"},
      {"missing content", body({{"messages", Json::array({{{"role", "user"}}})}}), "messages[0].content"},
      {"content number", body({{"messages", Json::array({user(3)})}}), "messages[0].content"},
      {"empty user content", body({{"messages", Json::array({user(Json::array())})}}), "messages[0].content"},
      {"unknown message key", body({{"messages", Json::array({{{"role", "user"}, {"content", "x"}, {"name", "n"}}})}}),
       "messages[0].name"},
      {"image block",
       body({{"messages", Json::array({user(Json::array({{{"type", "text"}, {"text", "see"}}, image}))})}}),
       "messages[0].content[1].type"},
      {"document block",
       body({{"messages", Json::array({user(Json::array({{{"type", "document"}, {"source", Json::object()}}}))})}}),
       "messages[0].content[0].type"},
      {"thinking block",
       body({{"messages", Json::array({user("q"), assistant(Json::array({{{"type", "thinking"}, {"thinking", "hm"}}})),
                                       user("r")})}}),
       "messages[1].content[0].type"},
      {"block without type", body({{"messages", Json::array({user(Json::array({{{"text", "x"}}}))})}}),
       "messages[0].content[0].type"},
      {"text without text", body({{"messages", Json::array({user(Json::array({{{"type", "text"}}}))})}}),
       "messages[0].content[0].text"},
      {"citations",
       body({{"messages",
              Json::array({user(Json::array({{{"type", "text"}, {"text", "x"}, {"citations", Json::array({1})}}}))})}}),
       "messages[0].content[0].citations"},
      {"unknown text key",
       body({{"messages", Json::array({user(Json::array({{{"type", "text"}, {"text", "x"}, {"extra", 1}}}))})}}),
       "messages[0].content[0].extra"},
      {"tool_use in user", body({{"messages", Json::array({user(Json::array({call}))})}}),
       "messages[0].content[0].type"},
      {"tool_result in assistant",
       body({{"messages",
              Json::array(
                  {user("q"), assistant(Json::array({{{"type", "tool_result"}, {"tool_use_id", "x"}}})), user("r")})}}),
       "messages[1].content[0].type"},
      {"tool_use without input",
       body({{"messages",
              Json::array({user("q"), assistant(Json::array({{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}}})),
                           user("r")})}}),
       "messages[1].content[0].input"},
      {"tool_use without id",
       body({{"messages",
              Json::array({user("q"),
                           assistant(Json::array({{{"type", "tool_use"}, {"name", "f"}, {"input", Json::object()}}})),
                           user("r")})}}),
       "messages[1].content[0].id"},
      {"tool_result unknown id",
       body({{"messages", Json::array({user(Json::array(
                              {{{"type", "tool_result"}, {"tool_use_id", "toolu_9"}, {"content", "x"}}}))})}}),
       "messages[0].content[0].tool_use_id"},
      {"tool_result image",
       body({{"messages", Json::array({user("q"), assistant(Json::array({call})),
                                       user(Json::array({{{"type", "tool_result"},
                                                          {"tool_use_id", "toolu_1"},
                                                          {"content", Json::array({image})}}}))})}}),
       "messages[2].content[0].content[0].type"},
      {"tool_result is_error string",
       body({{"messages",
              Json::array(
                  {user("q"), assistant(Json::array({call})),
                   user(Json::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"is_error", "yes"}}}))})}}),
       "messages[2].content[0].is_error"},
      {"final assistant tool_use", body({{"messages", Json::array({user("q"), assistant(Json::array({call}))})}}),
       "messages[1].content"},
      {"only a prefill", body({{"messages", Json::array({assistant("x")})}}), "messages"},
      {"system number", body({{"system", 1}}), "system"},
      {"system image", body({{"system", Json::array({image})}}), "system[0].type"},
      {"stop_sequences string", body({{"stop_sequences", "END"}}), "stop_sequences"},
      {"stop_sequences number", body({{"stop_sequences", Json::array({"a", 1})}}), "stop_sequences[1]"},
      {"stop_sequences too many", body({{"stop_sequences", Json(std::vector<std::string>(17, "x"))}}),
       "stop_sequences"},
      {"temperature", body({{"temperature", 3}}), "temperature"},
      {"top_p", body({{"top_p", 0}}), "top_p"},
      {"top_k", body({{"top_k", "5"}}), "top_k"},
      {"stream", body({{"stream", "yes"}}), "stream"},
      {"metadata", body({{"metadata", "x"}}), "metadata"},
      {"metadata key", body({{"metadata", {{"session", "x"}}}}), "metadata.session"},
      {"service_tier", body({{"service_tier", "priority"}}), "service_tier"},
      {"thinking", body({{"thinking", {{"type", "enabled"}, {"budget_tokens", 2048}}}}), "thinking"},
      {"container", body({{"container", "c"}}), "container"},
      {"mcp_servers", body({{"mcp_servers", Json::array()}}), "mcp_servers"},
      {"output_config", body({{"output_config", Json::object()}}), "output_config"},
      {"n", body({{"n", 2}}), "n"},
      {"cache_control type", body({{"cache_control", {{"type", "persistent"}}}}), "cache_control.type"},
      {"tools object", body({{"tools", Json::object()}}), "tools"},
      {"server tool", body({{"tools", Json::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})}}),
       "tools[0].type"},
      {"tool without schema", body({{"tools", Json::array({{{"name", "f"}}})}}), "tools[0].input_schema"},
      {"tool schema not object", body({{"tools", Json::array({{{"name", "f"}, {"input_schema", "x"}}})}}),
       "tools[0].input_schema"},
      {"tool bad name", body({{"tools", Json::array({{{"name", "bad name"}, {"input_schema", Json::object()}}})}}),
       "tools[0].name"},
      {"tool description number",
       body({{"tools", Json::array({{{"name", "f"}, {"description", 3}, {"input_schema", Json::object()}}})}}),
       "tools[0].description"},
      {"tool strict",
       body({{"tools", Json::array({{{"name", "f"}, {"strict", true}, {"input_schema", Json::object()}}})}}),
       "tools[0].strict"},
      {"tool unknown key",
       body({{"tools", Json::array({{{"name", "f"}, {"input_schema", Json::object()}, {"defer_loading", true}}})}}),
       "tools[0].defer_loading"},
      {"tool duplicate", body({{"tools", Json::array({kWeather, kWeather})}}), "tools[1].name"},
      {"tool_choice string", body({{"tools", tools}, {"tool_choice", "auto"}}), "tool_choice"},
      {"tool_choice type", body({{"tools", tools}, {"tool_choice", {{"type", "function"}}}}), "tool_choice.type"},
      {"tool_choice name missing", body({{"tools", tools}, {"tool_choice", {{"type", "tool"}}}}), "tool_choice.name"},
      {"tool_choice name unknown", body({{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "other"}}}}),
       "tool_choice.name"},
      {"tool_choice parallel type",
       body({{"tools", tools}, {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", 1}}}}),
       "tool_choice.disable_parallel_tool_use"},
      {"tool_choice none extra",
       body({{"tools", tools}, {"tool_choice", {{"type", "none"}, {"disable_parallel_tool_use", true}}}}),
       "tool_choice.disable_parallel_tool_use"},
      {"tool_choice without tools", body({{"tool_choice", {{"type", "any"}}}}), "tool_choice"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    ApiError e = parse_err(c.body);
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(AnthropicRequest, ErrorsUseAnthropicNames) {
  ApiError e = parse_err(body({{"stop_sequences", Json(std::vector<std::string>(17, "x"))}}));
  EXPECT_NE(e.message.find("'stop_sequences'"), std::string::npos) << e.message;
  e = parse_err(body({{"tools", Json::array({{{"name", "bad name"}, {"input_schema", Json::object()}}})}}));
  EXPECT_NE(e.message.find("'tools[0].name'"), std::string::npos) << e.message;
}

// ---- responses ----

ResponseMeta meta() { return ResponseMeta{"msg_abc", "served", 0}; }

TEST(AnthropicResponse, StopReasons) {
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kEos, false), "end_turn");
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kStop, false), "stop_sequence");
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kLength, false), "max_tokens");
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kEos, true), "tool_use");
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kStop, true), "tool_use");
  EXPECT_STREQ(anthropic_stop_reason(EventFinish::kLength, true), "max_tokens");
}

TEST(AnthropicResponse, ToolIds) {
  EXPECT_EQ(anthropic_tool_id("call_00ff"), "toolu_00ff");
  EXPECT_EQ(anthropic_tool_id("x1"), "toolu_x1");
}

TEST(AnthropicResponse, TextMessage) {
  ChoiceResult r;
  r.text = "Hello";
  r.finish = EventFinish::kEos;
  UsageTotals u{10, 3, 4};
  Json j = anthropic_message_json(meta(), r, u);
  EXPECT_EQ(j.dump(), R"({"id":"msg_abc","type":"message","role":"assistant","model":"served",)"
                      R"("content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,)"
                      R"("usage":{"input_tokens":6,"output_tokens":3,"cache_read_input_tokens":4,)"
                      R"("cache_creation_input_tokens":0}})");
}

TEST(AnthropicResponse, StopSequenceAndEmptyText) {
  ChoiceResult r;
  r.finish = EventFinish::kStop;
  r.stop_sequence = "END";
  Json j = anthropic_message_json(meta(), r, UsageTotals{});
  EXPECT_EQ(j["content"], Json::array());
  EXPECT_EQ(j["stop_reason"], "stop_sequence");
  EXPECT_EQ(j["stop_sequence"], "END");
  r.finish = EventFinish::kLength;
  j = anthropic_message_json(meta(), r, UsageTotals{});
  EXPECT_EQ(j["stop_reason"], "max_tokens");
  EXPECT_TRUE(j["stop_sequence"].is_null());
}

TEST(AnthropicResponse, ToolUseBlocks) {
  ChoiceResult r;
  r.text = "Checking.";
  r.finish = EventFinish::kEos;
  r.tool_calls = {ToolCall{"call_0a", "get_weather", R"({"city":"Paris"})"}, ToolCall{"call_0b", "get_time", R"({})"}};
  Json j = anthropic_message_json(meta(), r, UsageTotals{});
  ASSERT_EQ(j["content"].size(), 3u);
  EXPECT_EQ(j["content"][0], (Json{{"type", "text"}, {"text", "Checking."}}));
  EXPECT_EQ(j["content"][1],
            (Json{{"type", "tool_use"}, {"id", "toolu_0a"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}));
  EXPECT_EQ(j["content"][2]["input"], Json::object());
  EXPECT_EQ(j["stop_reason"], "tool_use");
  EXPECT_TRUE(j["stop_sequence"].is_null());
}

// Splits an SSE byte string into (event, data) pairs, checking the framing.
std::vector<std::pair<std::string, Json>> parse_sse(const std::string& s) {
  std::vector<std::pair<std::string, Json>> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = s.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string ev = s.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    const size_t nl = ev.find('\n');
    const std::string name = ev.substr(7, nl - 7);
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    Json data = Json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], name);
    out.emplace_back(name, std::move(data));
  }
  return out;
}

TEST(AnthropicStream, TextEvents) {
  ResponseMeta m = meta();
  MessageStreamEvents ev(m);
  std::string out;
  ev.start(out, 12);
  ev.text(out, "");
  ev.text(out, "Hel");
  ev.text(out, "lo");
  ev.stop(out, "stop_sequence", "END", UsageTotals{12, 2, 0});
  auto events = parse_sse(out);
  ASSERT_EQ(events.size(), 7u) << out;
  EXPECT_EQ(
      events[0].second.dump(),
      R"({"type":"message_start","message":{"id":"msg_abc","type":"message","role":"assistant","content":[],)"
      R"("model":"served","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":0}}})");
  EXPECT_EQ(events[1].second.dump(),
            R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
  EXPECT_EQ(events[2].second.dump(),
            R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}})");
  EXPECT_EQ(events[3].second["delta"]["text"], "lo");
  EXPECT_EQ(events[4].second.dump(), R"({"type":"content_block_stop","index":0})");
  EXPECT_EQ(events[5].second["delta"], (Json{{"stop_reason", "stop_sequence"}, {"stop_sequence", "END"}}));
  EXPECT_EQ(events[5].second["usage"]["output_tokens"], 2);
  EXPECT_EQ(events[5].second["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[6].first, "message_stop");
}

TEST(AnthropicStream, ToolUseEvents) {
  ResponseMeta m = meta();
  MessageStreamEvents ev(m);
  std::string out;
  ev.start(out, 5);
  ev.text(out, "Let me see.");
  ev.tool_calls(out, {ToolCall{"call_1", "get_weather", R"({"city":"Paris"})"}, ToolCall{"call_2", "f", "{}"}});
  ev.stop(out, "tool_use", "", UsageTotals{5, 9, 0});
  auto events = parse_sse(out);
  std::vector<std::string> names;
  for (auto& e : events) names.push_back(e.first);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                             "content_block_stop", "content_block_start", "content_block_delta",
                                             "content_block_stop", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[4].second.dump(), R"({"type":"content_block_start","index":1,"content_block":)"
                                     R"({"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}})");
  EXPECT_EQ(events[5].second.dump(), R"({"type":"content_block_delta","index":1,"delta":)"
                                     R"({"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}})");
  EXPECT_EQ(events[6].second["index"], 1);
  EXPECT_EQ(events[7].second["index"], 2);
  EXPECT_EQ(events[10].second["delta"], (Json{{"stop_reason", "tool_use"}, {"stop_sequence", nullptr}}));
}

TEST(AnthropicStream, ToolUseOnlyStartsAtIndexZero) {
  ResponseMeta m = meta();
  MessageStreamEvents ev(m);
  std::string out;
  ev.tool_calls(out, {ToolCall{"call_1", "f", "{}"}});
  auto events = parse_sse(out);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].second["index"], 0);
}

TEST(AnthropicStream, ErrorEvent) {
  ResponseMeta m = meta();
  MessageStreamEvents ev(m);
  std::string out;
  ev.error(out, timeout_error("the request timed out"));
  EXPECT_EQ(out,
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"timeout_error\",\"message\":\"the "
            "request timed out\"}}\n\n");
}

// ---- errors ----

TEST(AnthropicErrors, TypesByStatus) {
  EXPECT_STREQ(anthropic_error_type(invalid_request("x")), "invalid_request_error");
  EXPECT_STREQ(anthropic_error_type(authentication_error("x")), "authentication_error");
  EXPECT_STREQ(anthropic_error_type(not_found("x")), "not_found_error");
  EXPECT_STREQ(anthropic_error_type(request_too_large("x")), "request_too_large");
  EXPECT_STREQ(anthropic_error_type(server_overloaded("x")), "rate_limit_error");
  EXPECT_STREQ(anthropic_error_type(server_error("x")), "api_error");
  EXPECT_STREQ(anthropic_error_type(unavailable("x")), "overloaded_error");
  EXPECT_STREQ(anthropic_error_type(timeout_error("x")), "timeout_error");
  EXPECT_STREQ(anthropic_error_type(ApiError{405, "invalid_request_error", "x", ""}), "invalid_request_error");
  EXPECT_STREQ(anthropic_error_type(ApiError{502, "server_error", "x", ""}), "api_error");
  EXPECT_EQ(anthropic_error_json(not_found("no such model"), "req-1").dump(),
            R"({"type":"error","error":{"type":"not_found_error","message":"no such model"},"request_id":"req-1"})");
  // The field at fault is in the message (the body has no param).
  EXPECT_EQ(anthropic_error_json(invalid_request("content block type 'image' is not supported",
                                                 "messages[0].content[1].type"))["error"]["message"],
            "messages[0].content[1].type: content block type 'image' is not supported");
  EXPECT_EQ(anthropic_error_json(invalid_request("'max_tokens' is required", "max_tokens"))["error"]["message"],
            "'max_tokens' is required");
}

// ---- HTTP: x-api-key, Anthropic-shaped errors on /v1/messages (no model loaded) ----

class AnthropicHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.api_key = "sekret";
    cfg.served_model_name = "tiny";
    cfg.max_body_bytes = 1024;
    cfg.http_threads = 2;
    server_ = std::make_unique<HttpServer>(cfg);
    ASSERT_TRUE(server_->start().is_ok());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    client_.reset();
    server_->stop();
  }

  // The Anthropic error body of `r`, checked: status, shape, request_id = X-Request-Id.
  static std::string anthropic_error_of(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, status) << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.value("type", "") == "error" && j.contains("error")) << r->body;
    if (!j.is_object() || !j.contains("error")) return {};
    EXPECT_TRUE(j["error"].contains("message")) << r->body;
    EXPECT_EQ(j.value("request_id", ""), r->get_header_value("X-Request-Id"));
    return j["error"].value("type", "");
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(AnthropicHttp, ApiKeyHeaderAndErrorShapes) {
  const std::string b = R"({"max_tokens":8,"messages":[{"role":"user","content":"x"}]})";
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", b, "application/json"), 401), "authentication_error");
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", {{"x-api-key", "wrong"}}, b, "application/json"), 401),
            "authentication_error");
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", {{"X-Api-Key", "sekre"}}, b, "application/json"), 401),
            "authentication_error");
  // The right key passes (then: no model yet); anthropic-version is accepted.
  const httplib::Headers key{{"x-api-key", "sekret"}, {"anthropic-version", "2023-06-01"}};
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", key, b, "application/json"), 503), "overloaded_error");
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages/count_tokens", key, b, "application/json"), 503),
            "overloaded_error");
  EXPECT_EQ(anthropic_error_of(
                client_->Post("/v1/messages", {{"Authorization", "Bearer sekret"}}, b, "application/json"), 503),
            "overloaded_error");
  // A wrong x-api-key next to a right bearer token: either key may authorize.
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", {{"x-api-key", "no"}, {"Authorization", "Bearer sekret"}},
                                             b, "application/json"),
                               503),
            "overloaded_error");
  // x-api-key works on the OpenAI routes too (their errors keep the OpenAI shape).
  auto r = client_->Get("/v1/models", httplib::Headers{{"x-api-key", "sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(Json::parse(r->body).contains("error"));
  EXPECT_FALSE(Json::parse(r->body).contains("type"));
  // Wrong method, body too large.
  auto get = client_->Get("/v1/messages", key);
  EXPECT_EQ(anthropic_error_of(get, 405), "invalid_request_error");
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(anthropic_error_of(client_->Post("/v1/messages", key, std::string(4096, 'x'), "application/json"), 413),
            "request_too_large");
}

}  // namespace
}  // namespace hs::server
