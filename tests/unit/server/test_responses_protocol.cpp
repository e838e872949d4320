// tests/unit/server/test_responses_protocol.cpp — OpenAI's Responses API: request conversion
// into the OpenAI chat request (string input, every input item kind, instructions,
// text.format, tools and tool_choice, the accepted markers, every 400 naming its field), the
// Response object, the stream events (order, sequence numbers, the SDK's field names), and the
// HTTP layer's routes (a server without a model).
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "server/http_server.h"
#include "server/responses_protocol.h"

namespace hs::server {
namespace {

Json body(Json extra = Json::object()) {
  Json b = {{"model", "m"}, {"input", "Hi"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

const Json kParams = {
    {"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", Json::array({"city"})}};
const Json kWeather = {{"type", "function"},
                       {"name", "get_weather"},
                       {"description", "Weather of a city"},
                       {"parameters", kParams},
                       {"strict", true}};

Json msg(const char* role, Json content) { return Json{{"role", role}, {"content", std::move(content)}}; }

ResponsesRequest parse_ok(const Json& b) {
  ResponsesRequest r;
  auto e = parse_responses_request(b, r);
  EXPECT_FALSE(e) << (e ? e->param + ": " + e->message : "");
  return r;
}

ApiError parse_err(const Json& b) {
  ResponsesRequest r;
  auto e = parse_responses_request(b, r);
  EXPECT_TRUE(e) << b.dump();
  if (!e) return ApiError{};
  EXPECT_EQ(e->status, 400) << e->message;
  EXPECT_EQ(e->type, "invalid_request_error");
  return *e;
}

// ---- request conversion ----

TEST(ResponsesRequest, StringInputAndGenerationFields) {
  ResponsesRequest r = parse_ok(body({{"max_output_tokens", 32},
                                      {"temperature", 0.5},
                                      {"top_p", 0.9},
                                      {"stream", true},
                                      {"stream_options", {{"include_obfuscation", false}}}}));
  EXPECT_EQ(r.chat.gen.model, "m");
  EXPECT_EQ(r.chat.gen.max_tokens, 32);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.chat.gen.stream);
  EXPECT_FALSE(r.chat.gen.include_usage);
  EXPECT_EQ(r.chat.gen.n, 1);
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0], msg("user", "Hi"));
  EXPECT_FALSE(r.tools.active());
  EXPECT_FALSE(r.format.constrained());
  EXPECT_EQ(r.echo["max_output_tokens"], 32);
  EXPECT_EQ(r.echo["temperature"], 0.5);
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["tools"], Json::array());
  // Defaults: temperature and top_p 1, no max_output_tokens (the context is the bound).
  r = parse_ok(body());
  EXPECT_FALSE(r.chat.gen.max_tokens);
  EXPECT_EQ(r.echo["temperature"], 1.0);
  EXPECT_EQ(r.echo["top_p"], 1.0);
  EXPECT_EQ(r.echo["max_output_tokens"], nullptr);
  EXPECT_EQ(r.echo["parallel_tool_calls"], true);
}

TEST(ResponsesRequest, InstructionsComeFirst) {
  ResponsesRequest r = parse_ok(body({{"instructions", "Be brief."}}));
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0], msg("system", "Be brief."));
  EXPECT_EQ(r.chat.messages[1], msg("user", "Hi"));
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  r = parse_ok(body({{"instructions", ""}}));  // empty: no system message
  EXPECT_EQ(r.chat.messages.size(), 1u);
}

TEST(ResponsesRequest, MessageItems) {
  Json input = Json::array(
      {{{"type", "message"}, {"role", "developer"}, {"content", "Rules."}},
       msg("user", Json::array({{{"type", "input_text"}, {"text", "one"}}, {{"type", "input_text"}, {"text", "two"}}})),
       {{"type", "message"},
        {"id", "msg_1"},
        {"status", "completed"},
        {"role", "assistant"},
        {"content", Json::array({{{"type", "output_text"}, {"text", "ok"}, {"annotations", Json::array()},
                                  {"logprobs", Json::array()}}})}},
       msg("system", "Late system."),
       msg("user", "again")});
  ResponsesRequest r = parse_ok(body({{"input", input}}));
  const Json& m = r.chat.messages;
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[0], msg("system", "Rules."));  // developer → system
  EXPECT_EQ(m[1], msg("user", "one\ntwo"));
  EXPECT_EQ(m[2], msg("assistant", "ok"));
  EXPECT_EQ(m[3], msg("system", "Late system."));
  EXPECT_EQ(m[4], msg("user", "again"));
}

TEST(ResponsesRequest, FunctionCallsMergeIntoOneAssistantTurn) {
  Json input = Json::array({
      msg("user", "Weather in Paris and Lyon?"),
      msg("assistant", "Let me check."),
      {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"},
       {"id", "fc_1"}, {"status", "completed"}},
      {{"type", "function_call"}, {"call_id", "call_2"}, {"name", "get_weather"}, {"arguments", R"({"city":"Lyon"})"}},
      {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "18C"}},
      {{"type", "function_call_output"},
       {"call_id", "call_2"},
       {"output", Json::array({{{"type", "input_text"}, {"text", "rain"}}})}},
      {{"type", "function_call"}, {"call_id", "call_3"}, {"name", "get_weather"}, {"arguments", "{}"}},
  });
  ResponsesRequest r = parse_ok(body({{"input", input}, {"tools", Json::array({kWeather})}}));
  const Json& m = r.chat.messages;
  ASSERT_EQ(m.size(), 5u) << m.dump();
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], "Let me check.");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  // parse_chat_request gives the template the arguments as an object (from the JSON string).
  EXPECT_EQ(m[1]["tool_calls"][1]["function"]["arguments"], (Json{{"city", "Lyon"}}));
  EXPECT_EQ(m[2], (Json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18C"}}));
  EXPECT_EQ(m[3], (Json{{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "rain"}}));
  // A call after the tool results starts a new assistant turn.
  EXPECT_EQ(m[4]["role"], "assistant");
  EXPECT_EQ(m[4]["content"], "");
  EXPECT_EQ(m[4]["tool_calls"].size(), 1u);
}

TEST(ResponsesRequest, ToolsAndToolChoice) {
  Json chat, echo;
  Json tools = Json::array({kWeather, {{"type", "function"}, {"name", "get_time"}, {"parameters", nullptr},
                                       {"strict", false}}});
  ASSERT_FALSE(responses_to_chat_body(body({{"tools", tools}}), chat, echo));
  ASSERT_EQ(chat["tools"].size(), 2u);
  EXPECT_EQ(chat["tools"][0], (Json{{"type", "function"},
                                    {"function", {{"name", "get_weather"}, {"description", "Weather of a city"},
                                                  {"parameters", kParams}}}}));
  EXPECT_EQ(chat["tools"][1], (Json{{"type", "function"}, {"function", {{"name", "get_time"}}}}));
  EXPECT_FALSE(chat.contains("tool_choice"));
  EXPECT_EQ(echo["tools"][0], kWeather);
  EXPECT_EQ(echo["tools"][1]["description"], nullptr);
  EXPECT_EQ(echo["tools"][1]["strict"], false);

  ResponsesRequest r = parse_ok(body({{"tools", tools}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);
  EXPECT_EQ(r.tools.names, (std::vector<std::string>{"get_weather", "get_time"}));
  r = parse_ok(body({{"tools", tools}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_EQ(r.echo["parallel_tool_calls"], false);
  r = parse_ok(body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "get_time"}}}}));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "get_time");
  EXPECT_EQ(r.echo["tool_choice"], (Json{{"type", "function"}, {"name", "get_time"}}));
  r = parse_ok(body({{"tools", tools}, {"tool_choice", "none"}}));
  EXPECT_FALSE(r.tools.active());
  EXPECT_EQ(r.echo["tool_choice"], "none");
  // "auto" with no tools (the Agents SDK sends tools: [] for a tool-less agent) means nothing.
  r = parse_ok(body({{"tools", Json::array()}, {"tool_choice", "auto"}}));
  EXPECT_FALSE(r.tools.active());
}

TEST(ResponsesRequest, TextFormat) {
  ResponsesRequest r = parse_ok(body({{"text", {{"format", {{"type", "text"}}}}}}));
  EXPECT_FALSE(r.format.constrained());
  r = parse_ok(body({{"text", {{"format", {{"type", "json_object"}}}}}}));
  EXPECT_EQ(r.format.kind, ResponseFormat::Kind::kJsonObject);
  EXPECT_EQ(r.echo["text"]["format"], (Json{{"type", "json_object"}}));
  const Json fmt = {{"type", "json_schema"}, {"name", "city"}, {"schema", kParams}, {"strict", true}};
  r = parse_ok(body({{"text", {{"format", fmt}, {"verbosity", "medium"}}}}));
  EXPECT_EQ(r.format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.format.name, "city");
  EXPECT_EQ(r.format.schema, kParams);
  EXPECT_TRUE(r.format.strict);
  EXPECT_EQ(r.echo["text"]["format"], fmt);
  EXPECT_EQ(r.echo["text"]["verbosity"], "medium");
  r = parse_ok(body());
  EXPECT_EQ(r.echo["text"], (Json{{"format", {{"type", "text"}}}, {"verbosity", "medium"}}));
}

TEST(ResponsesRequest, AcceptedMarkers) {
  ResponsesRequest r = parse_ok(body({{"metadata", {{"k", "v"}}},
                                      {"user", "u-1"},
                                      {"safety_identifier", "s-1"},
                                      {"prompt_cache_key", "pk"},
                                      {"prompt_cache_retention", "in_memory"},
                                      {"store", true},
                                      {"service_tier", "auto"},
                                      {"max_tool_calls", 3},
                                      {"include", Json::array()},
                                      {"truncation", "disabled"},
                                      {"reasoning", {{"effort", "none"}}},
                                      {"background", false},
                                      {"previous_response_id", nullptr},
                                      {"top_logprobs", nullptr}}));
  EXPECT_EQ(r.echo["metadata"], (Json{{"k", "v"}}));
  EXPECT_EQ(r.echo["user"], "u-1");
  EXPECT_EQ(r.echo["safety_identifier"], "s-1");
  EXPECT_EQ(r.echo["prompt_cache_key"], "pk");
  EXPECT_EQ(r.echo["max_tool_calls"], 3);
  EXPECT_EQ(r.echo["reasoning"]["effort"], "none");
  parse_ok(body({{"store", false}, {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}}}));
}

struct BadCase {
  const char* name;
  Json body;
  const char* param;
};

TEST(ResponsesRequest, EveryBadRequestNamesItsField) {
  const Json tools = Json::array({kWeather});
  const Json call = {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"}, {"arguments", "{}"}};
  Json no_input = body();
  no_input.erase("input");
  auto items = [](Json v) { return body({{"input", std::move(v)}}); };
  auto tool_with = [&](const char* k, Json v) {
    Json t = kWeather;
    t[k] = std::move(v);
    return body({{"tools", Json::array({t})}});
  };
  const std::vector<BadCase> cases = {
      // storage and server-side state
      {"previous_response_id", body({{"previous_response_id", "resp_1"}}), "previous_response_id"},
      {"conversation", body({{"conversation", "conv_1"}}), "conversation"},
      {"prompt", body({{"prompt", {{"id", "pmpt_1"}}}}), "prompt"},
      {"background", body({{"background", true}}), "background"},
      {"context_management", body({{"context_management", Json::array({{{"type", "compaction"}}})}}),
       "context_management"},
      {"reasoning effort", body({{"reasoning", {{"effort", "low"}}}}), "reasoning.effort"},
      {"reasoning summary", body({{"reasoning", {{"summary", "auto"}}}}), "reasoning.summary"},
      {"reasoning mode", body({{"reasoning", {{"mode", "pro"}}}}), "reasoning.mode"},
      {"include value", body({{"include", Json::array({"message.output_text.logprobs"})}}), "include[0]"},
      {"include string", body({{"include", "x"}}), "include"},
      {"truncation auto", body({{"truncation", "auto"}}), "truncation"},
      {"top_logprobs", body({{"top_logprobs", 2}}), "top_logprobs"},
      {"unknown field", body({{"n", 2}}), "n"},
      {"moderation", body({{"moderation", {{"model", "x"}}}}), "moderation"},
      {"service_tier flex", body({{"service_tier", "flex"}}), "service_tier"},
      {"prompt_cache_retention 24h", body({{"prompt_cache_retention", "24h"}}), "prompt_cache_retention"},
      {"store string", body({{"store", "yes"}}), "store"},
      {"metadata number", body({{"metadata", {{"k", 1}}}}), "metadata.k"},
      {"stream_options without stream", body({{"stream_options", {{"include_obfuscation", false}}}}),
       "stream_options"},
      {"obfuscation", body({{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}),
       "stream_options.include_obfuscation"},
      // generation fields, renamed back from the chat parser
      {"max_output_tokens 0", body({{"max_output_tokens", 0}}), "max_output_tokens"},
      {"temperature 3", body({{"temperature", 3}}), "temperature"},
      {"stream string", body({{"stream", "yes"}}), "stream"},
      {"instructions number", body({{"instructions", 3}}), "instructions"},
      // input
      {"missing input", no_input, "input"},
      {"empty input", items(Json::array()), "input"},
      {"input number", items(3), "input"},
      {"item not object", items(Json::array({"hi"})), "input[0]"},
      {"unknown item type", items(Json::array({{{"type", "web_search_call"}, {"id", "ws_1"}}})), "input[0].type"},
      {"reasoning item", items(Json::array({{{"type", "reasoning"}, {"summary", Json::array()}}})), "input[0].type"},
      {"item_reference", items(Json::array({{{"type", "item_reference"}, {"id", "msg_1"}}})), "input[0].type"},
      {"bad role", items(Json::array({msg("tool", "x")})), "input[0].role"},
      {"missing content", items(Json::array({{{"role", "user"}}})), "input[0].content"},
      {"content number", items(Json::array({msg("user", 3)})), "input[0].content"},
      {"image part",
       items(Json::array({msg("user", Json::array({{{"type", "input_text"}, {"text", "see"}},
                                                   {{"type", "input_image"}, {"image_url", "data:,"}}}))})),
       "input[0].content[1].type"},
      {"file part", items(Json::array({msg("user", Json::array({{{"type", "input_file"}, {"file_id", "f"}}}))})),
       "input[0].content[0].type"},
      {"refusal in user message", items(Json::array({msg("user", Json::array({{{"type", "refusal"},
                                                                               {"refusal", "no"}}}))})),
       "input[0].content[0].type"},
      {"part without text", items(Json::array({msg("user", Json::array({{{"type", "input_text"}}}))})),
       "input[0].content[0].text"},
      {"unknown message key", items(Json::array({{{"role", "user"}, {"content", "x"}, {"name", "n"}}})),
       "input[0].name"},
      {"call without call_id", items(Json::array({{{"type", "function_call"}, {"name", "f"}, {"arguments", "{}"}}})),
       "input[0].call_id"},
      {"call arguments object",
       items(Json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", {{"a", 1}}}}})),
       "input[0].arguments"},
      {"call arguments not JSON",
       items(Json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{oops"}}})),
       "input[0].arguments"},
      {"output for no call", items(Json::array({{{"type", "function_call_output"}, {"call_id", "x"}, {"output", "r"}}})),
       "input[0].call_id"},
      {"output missing",
       items(Json::array({call, {{"type", "function_call_output"}, {"call_id", "call_1"}}})), "input[1].output"},
      {"output image",
       items(Json::array({call, {{"type", "function_call_output"}, {"call_id", "call_1"},
                                 {"output", Json::array({{{"type", "input_image"}, {"image_url", "x"}}})}}})),
       "input[1].output[0].type"},
      // tools
      {"tools object", body({{"tools", Json::object()}}), "tools"},
      {"web_search tool", body({{"tools", Json::array({{{"type", "web_search"}}})}}), "tools[0].type"},
      {"file_search tool", body({{"tools", Json::array({{{"type", "file_search"}, {"vector_store_ids", {"v"}}}})}}),
       "tools[0].type"},
      {"mcp tool", body({{"tools", Json::array({{{"type", "mcp"}, {"server_label", "x"}}})}}), "tools[0].type"},
      {"code_interpreter tool", body({{"tools", Json::array({{{"type", "code_interpreter"}}})}}), "tools[0].type"},
      {"computer tool", body({{"tools", Json::array({{{"type", "computer_use_preview"}}})}}), "tools[0].type"},
      {"image_generation tool", body({{"tools", Json::array({{{"type", "image_generation"}}})}}), "tools[0].type"},
      {"chat-shaped tool", body({{"tools", Json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}}),
       "tools[0].function"},
      {"tool name chars", tool_with("name", "get weather"), "tools[0].name"},
      {"tool parameters array", tool_with("parameters", Json::array()), "tools[0].parameters"},
      {"tool strict string", tool_with("strict", "yes"), "tools[0].strict"},
      {"tool defer_loading", tool_with("defer_loading", true), "tools[0].defer_loading"},
      {"duplicate tool", body({{"tools", Json::array({kWeather, kWeather})}}), "tools[1].name"},
      {"tool_choice unknown", body({{"tools", tools}, {"tool_choice", "any"}}), "tool_choice"},
      {"tool_choice required without tools", body({{"tool_choice", "required"}}), "tool_choice"},
      {"tool_choice not declared", body({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "x"}}}}),
       "tool_choice.name"},
      {"tool_choice hosted", body({{"tools", tools}, {"tool_choice", {{"type", "file_search"}}}}), "tool_choice.type"},
      {"tool_choice allowed_tools",
       body({{"tools", tools}, {"tool_choice", {{"type", "allowed_tools"}, {"mode", "auto"}}}}), "tool_choice.type"},
      {"parallel_tool_calls string", body({{"tools", tools}, {"parallel_tool_calls", "no"}}), "parallel_tool_calls"},
      // text
      {"text.format type", body({{"text", {{"format", {{"type", "xml"}}}}}}), "text.format.type"},
      {"json_schema without name",
       body({{"text", {{"format", {{"type", "json_schema"}, {"schema", kParams}}}}}}), "text.format.name"},
      {"json_schema without schema",
       body({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}}}), "text.format.schema"},
      {"json_schema schema string",
       body({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", "s"}}}}}}), "text.format.schema"},
      {"verbosity", body({{"text", {{"verbosity", "high"}}}}), "text.verbosity"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    ApiError e = parse_err(c.body);
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
  }
}

TEST(ResponsesRequest, ErrorsUseResponsesNames) {
  ApiError e = responses_names(invalid_request(
      "This model's maximum context length is 10 tokens. However, your messages resulted in 12 tokens, leaving no "
      "room for the completion. Please reduce the length of the messages.",
      "messages"));
  EXPECT_EQ(e.param, "input");
  EXPECT_EQ(e.message.find("messages"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("your input resulted"), std::string::npos) << e.message;
  e = responses_names(invalid_request("'response_format' together with 'tools' is not supported", "response_format"));
  EXPECT_EQ(e.param, "text.format");
  EXPECT_EQ(e.message, "'text.format' together with 'tools' is not supported");
  e = responses_names(invalid_request("'tools[1].function.name' bad", "tools[1].function.name"));
  EXPECT_EQ(e.param, "tools[1].name");
}

// ---- Response object ----

ResponseMeta meta() { return ResponseMeta{"resp_abc", "served", 1700000000}; }

TEST(ResponsesResponse, TextResponse) {
  ResponsesRequest rq = parse_ok(body({{"instructions", "I"}, {"max_output_tokens", 8}, {"metadata", {{"k", "v"}}}}));
  ChoiceResult r;
  r.text = "Hello.";
  r.finish = EventFinish::kEos;
  Json j = response_json(meta(), rq.echo, r, UsageTotals{10, 3, 4}, "msg_1");
  EXPECT_EQ(j["id"], "resp_abc");
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["created_at"], 1700000000);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["completed_at"].is_number_integer());
  EXPECT_EQ(j["error"], nullptr);
  EXPECT_EQ(j["incomplete_details"], nullptr);
  EXPECT_EQ(j["model"], "served");
  EXPECT_EQ(j["instructions"], "I");
  EXPECT_EQ(j["max_output_tokens"], 8);
  EXPECT_EQ(j["metadata"], (Json{{"k", "v"}}));
  EXPECT_EQ(j["store"], false);
  EXPECT_EQ(j["parallel_tool_calls"], true);
  EXPECT_EQ(j["tool_choice"], "auto");
  EXPECT_EQ(j["tools"], Json::array());
  EXPECT_EQ(j["text"]["format"]["type"], "text");
  EXPECT_EQ(j["truncation"], "disabled");
  EXPECT_EQ(j["previous_response_id"], nullptr);
  EXPECT_EQ(j["output"].dump(),
            R"([{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text",)"
            R"("annotations":[],"logprobs":[],"text":"Hello."}],"role":"assistant"}])");
  EXPECT_EQ(j["usage"].dump(),
            R"({"input_tokens":10,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":0},)"
            R"("output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":13})");
}

TEST(ResponsesResponse, IncompleteAtTheLimit) {
  ChoiceResult r;
  r.text = "Once upon";
  r.finish = EventFinish::kLength;
  Json j = response_json(meta(), Json::object(), r, UsageTotals{5, 2, 0}, "msg_1");
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"], (Json{{"reason", "max_output_tokens"}}));
  EXPECT_EQ(j["completed_at"], nullptr);
  EXPECT_EQ(j["output"][0]["status"], "incomplete");
  EXPECT_STREQ(response_status(EventFinish::kStop), "completed");
}

TEST(ResponsesResponse, FunctionCallItems) {
  ChoiceResult r;
  r.tool_calls = {ToolCall{"call_00ab", "get_weather", R"({"city":"Paris"})"}, ToolCall{"x9", "f", "{}"}};
  r.finish = EventFinish::kEos;
  Json j = response_json(meta(), Json::object(), r, UsageTotals{5, 9, 0}, "msg_1");
  ASSERT_EQ(j["output"].size(), 2u);  // no text: no message item
  EXPECT_EQ(j["output"][0].dump(), R"({"id":"fc_00ab","type":"function_call","status":"completed",)"
                                   R"("arguments":"{\"city\":\"Paris\"}","call_id":"call_00ab","name":"get_weather"})");
  EXPECT_EQ(j["output"][1]["id"], "fc_x9");
  EXPECT_EQ(function_call_item_id("call_1"), "fc_1");
  // Text and a call: the message first.
  r.text = "Checking.";
  j = response_json(meta(), Json::object(), r, UsageTotals{5, 9, 0}, "msg_1");
  ASSERT_EQ(j["output"].size(), 3u);
  EXPECT_EQ(j["output"][0]["type"], "message");
  // Neither: an empty message, so output_text is "".
  r = ChoiceResult{};
  r.finish = EventFinish::kEos;
  j = response_json(meta(), Json::object(), r, UsageTotals{5, 0, 0}, "msg_1");
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "");
}

// ---- stream events ----

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
    EXPECT_EQ(ev.substr(nl + 1, 6), "data: ");
    Json data = Json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], name);
    out.emplace_back(name, std::move(data));
  }
  return out;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Json>>& events) {
  std::vector<std::string> names;
  for (size_t i = 0; i < events.size(); ++i) {
    names.push_back(events[i].first);
    EXPECT_EQ(events[i].second["sequence_number"], static_cast<int>(i)) << events[i].first;
  }
  return names;
}

TEST(ResponsesStream, TextEvents) {
  ResponseMeta m = meta();
  Json echo = parse_ok(body({{"max_output_tokens", 4}})).echo;
  ResponseStreamEvents ev(m, echo, "msg_1");
  std::string out;
  ev.start(out);
  ev.text(out, "");
  ev.text(out, "Hel");
  ev.text(out, "lo");
  ev.finish(out, {}, EventFinish::kLength);
  ev.end(out, UsageTotals{7, 4, 0});
  auto events = parse_sse(out);
  EXPECT_EQ(names_of(events),
            (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added", "response.output_text.delta",
                                      "response.output_text.delta", "response.output_text.done",
                                      "response.content_part.done", "response.output_item.done",
                                      "response.incomplete"}));
  const Json& created = events[0].second["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(created["output"], Json::array());
  EXPECT_EQ(created["usage"], nullptr);
  EXPECT_EQ(created["max_output_tokens"], 4);
  EXPECT_EQ(events[2].second["output_index"], 0);
  EXPECT_EQ(events[2].second["item"].dump(),
            R"({"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"})");
  EXPECT_EQ(events[3].second["part"]["type"], "output_text");
  EXPECT_EQ(events[3].second["item_id"], "msg_1");
  const Json& delta = events[4].second;
  EXPECT_EQ(delta["item_id"], "msg_1");
  EXPECT_EQ(delta["output_index"], 0);
  EXPECT_EQ(delta["content_index"], 0);
  EXPECT_EQ(delta["delta"], "Hel");
  EXPECT_EQ(delta["logprobs"], Json::array());
  EXPECT_EQ(events[6].second["text"], "Hello");
  EXPECT_EQ(events[7].second["part"]["text"], "Hello");
  EXPECT_EQ(events[8].second["item"]["status"], "incomplete");
  const Json& final = events[9].second["response"];
  EXPECT_EQ(final["status"], "incomplete");
  EXPECT_EQ(final["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(final["output"][0], events[8].second["item"]);
  EXPECT_EQ(final["usage"]["output_tokens"], 4);
  EXPECT_EQ(ev.sequence_number(), 10);
}

TEST(ResponsesStream, FunctionCallEvents) {
  ResponseMeta m = meta();
  Json echo = Json::object();
  ResponseStreamEvents ev(m, echo, "msg_1");
  std::string out;
  ev.start(out);
  ev.text(out, "Let me see.");
  ev.finish(out, {ToolCall{"call_1", "get_weather", R"({"city":"Paris"})"}}, EventFinish::kEos);
  ev.end(out, UsageTotals{5, 9, 0});
  auto events = parse_sse(out);
  EXPECT_EQ(names_of(events),
            (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.output_item.added",
                                      "response.function_call_arguments.delta",
                                      "response.function_call_arguments.done", "response.output_item.done",
                                      "response.completed"}));
  EXPECT_EQ(events[8].second["output_index"], 1);
  EXPECT_EQ(events[8].second["item"].dump(), R"({"id":"fc_1","type":"function_call","status":"in_progress",)"
                                             R"("arguments":"","call_id":"call_1","name":"get_weather"})");
  EXPECT_EQ(events[9].second["item_id"], "fc_1");
  EXPECT_EQ(events[9].second["delta"], R"({"city":"Paris"})");
  EXPECT_EQ(events[10].second["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(events[11].second["item"]["status"], "completed");
  const Json& final = events[12].second["response"];
  EXPECT_EQ(final["status"], "completed");
  ASSERT_EQ(final["output"].size(), 2u);
  EXPECT_EQ(final["output"][1]["arguments"], R"({"city":"Paris"})");
}

TEST(ResponsesStream, CallOnlyStartsAtIndexZeroAndEmptyAnswerHasAMessage) {
  ResponseMeta m = meta();
  Json echo = Json::object();
  ResponseStreamEvents ev(m, echo, "msg_1");
  std::string out;
  ev.finish(out, {ToolCall{"call_1", "f", "{}"}}, EventFinish::kEos);
  auto events = parse_sse(out);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].second["output_index"], 0);
  EXPECT_EQ(events[0].second["item"]["type"], "function_call");

  ResponseStreamEvents empty(m, echo, "msg_2");
  out.clear();
  empty.finish(out, {}, EventFinish::kEos);
  events = parse_sse(out);
  ASSERT_EQ(events.size(), 5u);  // item added, part added, text done, part done, item done
  EXPECT_EQ(events[2].second["text"], "");
}

TEST(ResponsesStream, FailureEvents) {
  ResponseMeta m = meta();
  Json echo = Json::object();
  ResponseStreamEvents ev(m, echo, "msg_1");
  std::string out;
  ev.start(out);
  ev.text(out, "par");
  ev.failure(out, timeout_error("the request timed out"));
  auto events = parse_sse(out);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[5].second.dump(), R"({"type":"error","sequence_number":5,"code":"server_error",)"
                                     R"("message":"the request timed out","param":null})");
  EXPECT_EQ(events[6].first, "response.failed");
  EXPECT_EQ(events[6].second["response"]["status"], "failed");
  EXPECT_EQ(events[6].second["response"]["error"],
            (Json{{"code", "server_error"}, {"message", "the request timed out"}}));
}

// ---- HTTP: the routes on a server without a model ----

TEST(ResponsesHttp, RoutesWithoutAModel) {
  ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.api_key = "sekret";
  cfg.served_model_name = "tiny";
  cfg.http_threads = 2;
  HttpServer server(cfg);
  ASSERT_TRUE(server.start().is_ok());
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10, 0);
  const httplib::Headers key{{"Authorization", "Bearer sekret"}};
  const std::string b = R"({"input":"x"})";
  auto r = client.Post("/v1/responses", b, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = client.Post("/v1/responses", key, b, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);  // the model is not loaded
  EXPECT_TRUE(Json::parse(r->body).contains("error"));
  r = client.Get("/v1/responses", key);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  for (const char* path : {"/v1/responses/resp_123", "/v1/responses/resp_123/input_items"}) {
    r = client.Get(path, key);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
    Json j = Json::parse(r->body);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("does not store responses"), std::string::npos);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("resp_123"), std::string::npos);
  }
  r = client.Delete("/v1/responses/resp_123", key);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = client.Get("/v1/responses/resp_123");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  server.stop();
}

}  // namespace
}  // namespace hs::server
