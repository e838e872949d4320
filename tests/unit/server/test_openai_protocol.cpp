// tests/unit/server/test_openai_protocol.cpp — request parsing and validation (every field,
// wrong types and ranges → 400 naming the field), the context-length rule, response and
// logprobs shapes, SSE framing, error JSON, and the Prometheus text format.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"

namespace hs::server {
namespace {

Json chat_body(Json extra = Json::object()) {
  Json b = {{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

Json completion_body(Json extra = Json::object()) {
  Json b = {{"prompt", "Hello"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// ---- chat parsing ----

TEST(ChatRequest, Defaults) {
  ChatRequest r;
  ASSERT_FALSE(parse_chat_request(chat_body(), r));
  EXPECT_EQ(r.gen.model, "");
  EXPECT_FALSE(r.gen.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.gen.sampling.seed.has_value());
  EXPECT_EQ(r.gen.n, 1);
  EXPECT_FALSE(r.gen.stream);
  EXPECT_FALSE(r.gen.include_usage);
  EXPECT_FALSE(r.gen.ignore_eos);
  EXPECT_EQ(r.gen.logprobs, -1);
  EXPECT_TRUE(r.gen.stop.empty());
  EXPECT_TRUE(r.add_generation_prompt);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0]["role"], "user");
  EXPECT_EQ(r.messages[0]["content"], "Hi");
}

TEST(ChatRequest, EveryField) {
  Json extra = {{"model", "m"},
                {"max_tokens", 7},
                {"temperature", 0.5},
                {"top_p", 0.9},
                {"top_k", 40},
                {"min_p", 0.05},
                {"seed", 42},
                {"stop", Json::array({"a", "", "bc"})},
                {"n", 3},
                {"presence_penalty", 0.5},
                {"frequency_penalty", -0.5},
                {"repetition_penalty", 1.1},
                {"logprobs", true},
                {"top_logprobs", 5},
                {"ignore_eos", true},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}},
                {"add_generation_prompt", false},
                {"chat_template_kwargs", {{"enable_thinking", false}}},
                {"some_unknown_field", {{"x", 1}}}};
  ChatRequest r;
  auto err = parse_chat_request(chat_body(extra), r);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(r.gen.model, "m");
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.05f);
  EXPECT_EQ(r.gen.sampling.seed, 42u);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"a", "bc"}));  // empty strings dropped
  EXPECT_EQ(r.gen.n, 3);
  EXPECT_FLOAT_EQ(r.gen.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.gen.logprobs, 5);
  EXPECT_TRUE(r.gen.ignore_eos);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
}

TEST(ChatRequest, LogitBiasAndInformationalFields) {
  Json body = chat_body();
  body["logit_bias"] = {{"7", -100}, {"42", 2.5}};
  body["modalities"] = Json::array({"text"});
  body["user"] = "u-1";
  body["metadata"] = {{"k", "v"}};
  body["store"] = false;
  ChatRequest r;
  ASSERT_FALSE(parse_chat_request(body, r));
  ASSERT_EQ(r.gen.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.gen.sampling.logit_bias[0], (std::pair<int32_t, float>{7, -100.0f}));
  EXPECT_EQ(r.gen.sampling.logit_bias[1], (std::pair<int32_t, float>{42, 2.5f}));
  Json comp = {{"prompt", "x"}, {"suffix", "y"}};
  CompletionRequest c;
  auto err = parse_completion_request(comp, c);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "suffix");
}

TEST(ChatRequest, SmallVariants) {
  ChatRequest r;
  ASSERT_FALSE(parse_chat_request(chat_body({{"max_tokens", 100}, {"max_completion_tokens", 5}}), r));
  EXPECT_EQ(r.gen.max_tokens, 5);  // the newer name wins
  ASSERT_FALSE(parse_chat_request(chat_body({{"top_k", -1}}), r));
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  ASSERT_FALSE(parse_chat_request(chat_body({{"top_k", 0}}), r));
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  ASSERT_FALSE(parse_chat_request(chat_body({{"stop", "END"}}), r));
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  ASSERT_FALSE(parse_chat_request(chat_body({{"logprobs", true}}), r));
  EXPECT_EQ(r.gen.logprobs, 0);  // chosen token only
  ASSERT_FALSE(parse_chat_request(chat_body({{"max_tokens", 8.0}}), r));  // integral float
  EXPECT_EQ(r.gen.max_tokens, 8);
  ASSERT_FALSE(parse_chat_request(chat_body({{"seed", -3}}), r));
  EXPECT_EQ(r.gen.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  ASSERT_FALSE(parse_chat_request(chat_body({{"temperature", 0}}), r));
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.0f);  // greedy
  // null means absent
  ASSERT_FALSE(parse_chat_request(
      chat_body({{"temperature", nullptr}, {"max_tokens", nullptr}, {"stop", nullptr}, {"stream_options", nullptr}}), r));
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.gen.max_tokens.has_value());
}

TEST(ChatRequest, ContentPartsAndMessageKeys) {
  Json body = {{"messages", Json::array({
                                {{"role", "system"}, {"content", "Be brief."}},
                                {{"role", "user"},
                                 {"content", Json::array({{{"type", "text"}, {"text", "one"}},
                                                          {{"type", "text"}, {"text", "two"}}})}},
                                {{"role", "assistant"}, {"content", nullptr}, {"name", "bot"}},
                            })}};
  ChatRequest r;
  auto err = parse_chat_request(body, r);
  ASSERT_FALSE(err) << err->message;
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "one\ntwo");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["name"], "bot");  // other keys pass through to the template
}

struct BadField {
  const char* name;
  Json patch;
  const char* param;
};

class ChatBadField : public ::testing::TestWithParam<BadField> {};

TEST_P(ChatBadField, Is400NamingTheField) {
  const BadField& c = GetParam();
  Json body = chat_body();
  for (auto& [k, v] : c.patch.items()) body[k] = v;
  ChatRequest r;
  MaybeError err = parse_chat_request(body, r);
  ASSERT_TRUE(err) << c.name << " was accepted";
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->type, "invalid_request_error");
  EXPECT_EQ(err->param, c.param) << err->message;
  EXPECT_FALSE(err->message.empty());
}

std::string bad_name(const ::testing::TestParamInfo<BadField>& i) { return i.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Fields, ChatBadField,
    ::testing::Values(
        BadField{"temperature_string", {{"temperature", "hot"}}, "temperature"},
        BadField{"logit_bias_array", {{"logit_bias", Json::array({1})}}, "logit_bias"},
        BadField{"logit_bias_key", {{"logit_bias", {{"abc", 1}}}}, "logit_bias"},
        BadField{"logit_bias_negative_key", {{"logit_bias", {{"-3", 1}}}}, "logit_bias"},
        BadField{"logit_bias_high", {{"logit_bias", {{"5", 101}}}}, "logit_bias"},
        BadField{"logit_bias_string", {{"logit_bias", {{"5", "x"}}}}, "logit_bias.5"},
        BadField{"functions", {{"functions", Json::array()}}, "functions"},
        BadField{"function_call", {{"function_call", "auto"}}, "function_call"},
        BadField{"audio", {{"audio", {{"voice", "x"}}}}, "audio"},
        BadField{"modalities_audio", {{"modalities", Json::array({"text", "audio"})}}, "modalities"},
        BadField{"prediction", {{"prediction", {{"type", "content"}}}}, "prediction"},
        BadField{"reasoning_effort", {{"reasoning_effort", "low"}}, "reasoning_effort"},
        BadField{"temperature_bool", {{"temperature", true}}, "temperature"},
        BadField{"temperature_high", {{"temperature", 2.5}}, "temperature"},
        BadField{"temperature_negative", {{"temperature", -0.1}}, "temperature"},
        BadField{"top_p_zero", {{"top_p", 0}}, "top_p"},
        BadField{"top_p_high", {{"top_p", 1.5}}, "top_p"},
        BadField{"top_k_fraction", {{"top_k", 1.5}}, "top_k"},
        BadField{"top_k_below", {{"top_k", -2}}, "top_k"},
        BadField{"min_p_high", {{"min_p", 2}}, "min_p"},
        BadField{"seed_string", {{"seed", "x"}}, "seed"},
        BadField{"stop_number", {{"stop", 5}}, "stop"},
        BadField{"stop_array_number", {{"stop", Json::array({"a", 1})}}, "stop[1]"},
        BadField{"stop_too_many", {{"stop", Json(std::vector<std::string>(17, "x"))}}, "stop"},
        BadField{"n_zero", {{"n", 0}}, "n"},
        BadField{"n_high", {{"n", 17}}, "n"},
        BadField{"presence_high", {{"presence_penalty", 3}}, "presence_penalty"},
        BadField{"frequency_low", {{"frequency_penalty", -2.5}}, "frequency_penalty"},
        BadField{"repetition_zero", {{"repetition_penalty", 0}}, "repetition_penalty"},
        BadField{"logprobs_string", {{"logprobs", "yes"}}, "logprobs"},
        BadField{"top_logprobs_high", {{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
        BadField{"top_logprobs_alone", {{"top_logprobs", 3}}, "top_logprobs"},
        BadField{"ignore_eos_int", {{"ignore_eos", 1}}, "ignore_eos"},
        BadField{"stream_string", {{"stream", "true"}}, "stream"},
        BadField{"stream_options_no_stream", {{"stream_options", {{"include_usage", true}}}}, "stream_options"},
        BadField{"include_usage_string",
                 {{"stream", true}, {"stream_options", {{"include_usage", "y"}}}},
                 "stream_options.include_usage"},
        BadField{"stream_options_array", {{"stream", true}, {"stream_options", Json::array()}}, "stream_options"},
        BadField{"max_tokens_zero", {{"max_tokens", 0}}, "max_tokens"},
        BadField{"max_tokens_negative", {{"max_tokens", -1}}, "max_tokens"},
        BadField{"max_tokens_fraction", {{"max_tokens", 1.5}}, "max_tokens"},
        BadField{"max_tokens_string", {{"max_tokens", "ten"}}, "max_tokens"},
        BadField{"max_completion_tokens_zero", {{"max_completion_tokens", 0}}, "max_completion_tokens"},
        BadField{"model_number", {{"model", 5}}, "model"},
        BadField{"messages_string", {{"messages", "hello"}}, "messages"},
        BadField{"messages_empty", {{"messages", Json::array()}}, "messages"},
        BadField{"messages_missing", {{"messages", nullptr}}, "messages"},
        BadField{"message_not_object", {{"messages", Json::array({"hi"})}}, "messages[0]"},
        BadField{"role_missing", {{"messages", Json::array({{{"content", "x"}}})}}, "messages[0].role"},
        BadField{"role_number", {{"messages", Json::array({{{"role", 5}, {"content", "x"}}})}}, "messages[0].role"},
        BadField{"content_number",
                 {{"messages", Json::array({{{"role", "user"}, {"content", 5}}})}},
                 "messages[0].content"},
        BadField{"content_image",
                 {{"messages", Json::array({{{"role", "user"},
                                             {"content", Json::array({{{"type", "text"}, {"text", "a"}},
                                                                      {{"type", "image_url"}}})}}})}},
                 "messages[0].content[1].type"},
        BadField{"content_text_missing",
                 {{"messages", Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "text"}}})}}})}},
                 "messages[0].content[0].text"},
        BadField{"kwargs_string", {{"chat_template_kwargs", "x"}}, "chat_template_kwargs"}),
    bad_name);

// ---- completions parsing ----

TEST(CompletionRequest, PromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(completion_body(), r));
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_text, "Hello");
  EXPECT_EQ(r.gen.max_tokens, kDefaultCompletionMaxTokens);  // OpenAI / vLLM default
  EXPECT_EQ(r.gen.logprobs, -1);

  ASSERT_FALSE(parse_completion_request(completion_body({{"prompt", Json::array({"only"})}}), r));
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_text, "only");

  ASSERT_FALSE(parse_completion_request(completion_body({{"prompt", Json::array({1, 2, 3})}}), r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));

  ASSERT_FALSE(parse_completion_request(completion_body({{"prompt", Json::array({Json::array({4, 5})})}}), r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{4, 5}));

  ASSERT_FALSE(parse_completion_request(completion_body({{"logprobs", 3}, {"max_tokens", 9}}), r));
  EXPECT_EQ(r.gen.logprobs, 3);
  EXPECT_EQ(r.gen.max_tokens, 9);
}

TEST(CompletionRequest, BadPromptsAndFields) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {{{"prompt", Json::array({"a", "b"})}}, "prompt"},          // several prompts
      {{{"prompt", Json::array()}}, "prompt"},                    // empty
      {{{"prompt", 42}}, "prompt"},                               // wrong type
      {{{"prompt", nullptr}}, "prompt"},                          // missing
      {{{"prompt", Json::array({1, "a"})}}, "prompt[1]"},         // mixed
      {{{"prompt", Json::array({-1})}}, "prompt[0]"},             // negative id
      {{{"prompt", Json::array({Json::array()})}}, "prompt"},     // one empty token list
      {{{"logprobs", true}}, "logprobs"},                         // completions logprobs is an int
      {{{"logprobs", 21}}, "logprobs"},
      {{{"echo", true}}, "echo"},
      {{{"max_tokens", "ten"}}, "max_tokens"},
      {{{"presence_penalty", 9}}, "presence_penalty"},
  };
  for (const auto& [patch, param] : cases) {
    Json body = completion_body();
    for (auto& [k, v] : patch.items()) body[k] = v;
    CompletionRequest r;
    MaybeError err = parse_completion_request(body, r);
    ASSERT_TRUE(err) << dump_json(patch);
    EXPECT_EQ(err->status, 400);
    EXPECT_EQ(err->param, param) << dump_json(patch) << ": " << err->message;
  }
  CompletionRequest r;
  MaybeError err = parse_completion_request(completion_body({{"prompt", Json::array({"a", "b"})}}), r);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("one prompt"), std::string::npos) << err->message;
}

TEST(JsonBody, MalformedAndNotObject) {
  Json j;
  MaybeError e = parse_json_body(R"({"messages": [)", j);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_NE(e->message.find("JSON"), std::string::npos);
  e = parse_json_body("[1, 2]", j);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_FALSE(parse_json_body(R"({"a": 1})", j));
  EXPECT_EQ(j["a"], 1);
  EXPECT_TRUE(parse_json_body("{\"a\": \"\xff\"}", j));  // invalid UTF-8 is rejected, not thrown
}

TEST(Tokenize, Requests) {
  TokenizeRequest t;
  ASSERT_FALSE(parse_tokenize_request(Json{{"prompt", "hi"}}, t));
  EXPECT_FALSE(t.has_messages);
  EXPECT_EQ(t.prompt, "hi");
  EXPECT_FALSE(t.add_special_tokens.has_value());
  ASSERT_FALSE(parse_tokenize_request(Json{{"prompt", "hi"}, {"add_special_tokens", false}}, t));
  EXPECT_EQ(t.add_special_tokens, false);
  TokenizeRequest m;
  ASSERT_FALSE(parse_tokenize_request(chat_body(), m));
  EXPECT_TRUE(m.has_messages);
  EXPECT_TRUE(parse_tokenize_request(Json::object(), t));
  EXPECT_TRUE(parse_tokenize_request(Json{{"prompt", "a"}, {"messages", Json::array()}}, t));
  MaybeError e = parse_tokenize_request(Json{{"prompt", 3}}, t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");

  DetokenizeRequest d;
  ASSERT_FALSE(parse_detokenize_request(Json{{"tokens", {1, 2}}}, d));
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2}));
  e = parse_detokenize_request(Json{{"tokens", "x"}}, d);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tokens");
  EXPECT_TRUE(parse_detokenize_request(Json::object(), d));
}

TEST(Validation, ModelAndTokenIds) {
  EXPECT_FALSE(check_model("", "served"));
  EXPECT_FALSE(check_model("served", "served"));
  MaybeError e = check_model("gpt-17", "served");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->type, "not_found_error");
  EXPECT_EQ(e->param, "model");
  EXPECT_NE(e->message.find("gpt-17"), std::string::npos);

  const std::vector<int32_t> ok{0, 5, 99}, bad{0, 100};
  EXPECT_FALSE(check_token_ids(ok, 100, "prompt"));
  e = check_token_ids(bad, 100, "prompt");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "prompt");
}

TEST(ContextLength, OverLongMessageHasBothNumbers) {
  GenerationOptions g;
  g.max_tokens = 1000;
  int max_tokens = 0;
  MaybeError e = resolve_max_tokens(g, 8000, 8192, /*chat=*/true, max_tokens);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_EQ(e->param, "messages");
  for (const char* s : {"8192", "9000", "8000", "1000", "messages", "completion"})
    EXPECT_NE(e->message.find(s), std::string::npos) << s << " missing in: " << e->message;

  e = resolve_max_tokens(g, 8000, 8192, /*chat=*/false, max_tokens);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "prompt");

  g.max_tokens = 192;  // exactly fits
  ASSERT_FALSE(resolve_max_tokens(g, 8000, 8192, true, max_tokens));
  EXPECT_EQ(max_tokens, 192);
}

TEST(ContextLength, DefaultFillsTheContext) {
  GenerationOptions g;  // no max_tokens (chat)
  int max_tokens = 0;
  ASSERT_FALSE(resolve_max_tokens(g, 100, 4096, true, max_tokens));
  EXPECT_EQ(max_tokens, 3996);
  MaybeError e = resolve_max_tokens(g, 5000, 4096, true, max_tokens);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("4096"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("5000"), std::string::npos) << e->message;
  EXPECT_TRUE(resolve_max_tokens(g, 0, 4096, true, max_tokens));  // empty prompt
}

TEST(RequestParamsFromOptions, SeedPerChoice) {
  GenerationOptions g;
  g.sampling.seed = 10;
  g.sampling.temperature = 0.7f;
  g.stop = {"x"};
  g.logprobs = 2;
  g.ignore_eos = true;
  RequestParams p0 = make_request_params(g, {1, 2}, 5, 0, 30.0);
  RequestParams p2 = make_request_params(g, {1, 2}, 5, 2, 30.0);
  EXPECT_EQ(p0.sampling.seed, 10u);
  EXPECT_EQ(p2.sampling.seed, 12u);
  EXPECT_EQ(p0.prompt, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(p0.max_tokens, 5);
  EXPECT_EQ(p0.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p0.logprobs, 2);
  EXPECT_TRUE(p0.ignore_eos);
  EXPECT_DOUBLE_EQ(p0.timeout_s, 30.0);
  EXPECT_FLOAT_EQ(p2.sampling.temperature, 0.7f);
  g.sampling.seed.reset();
  EXPECT_FALSE(make_request_params(g, {1}, 1, 3, 0).sampling.seed.has_value());
}

// ---- errors ----

TEST(ApiErrors, JsonShape) {
  Json j = api_error_json(invalid_request("bad 'top_p'", "top_p"));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j.size(), 1u);
  const Json& e = j["error"];
  EXPECT_EQ(e["message"], "bad 'top_p'");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "top_p");
  EXPECT_TRUE(e["code"].is_number_integer());
  EXPECT_EQ(e["code"], 400);
  EXPECT_TRUE(api_error_json(server_error("x"))["error"]["param"].is_null());
  EXPECT_EQ(Json::parse(api_error_body(not_found("m"))), api_error_json(not_found("m")));

  const std::vector<std::tuple<ApiError, int, const char*>> kinds = {
      {invalid_request("m"), 400, "invalid_request_error"}, {authentication_error("m"), 401, "authentication_error"},
      {not_found("m"), 404, "not_found_error"},             {request_too_large("m"), 413, "request_too_large"},
      {server_overloaded("m"), 429, "server_overloaded"},   {server_error("m"), 500, "server_error"},
      {unavailable("m"), 503, "unavailable_error"},         {timeout_error("m"), 504, "timeout"},
  };
  for (const auto& [err, status, type] : kinds) {
    EXPECT_EQ(err.status, status);
    EXPECT_EQ(err.type, type);
    EXPECT_EQ(api_error_json(err)["error"]["code"], status);
  }
  // Invalid UTF-8 in a message is replaced, never thrown on.
  EXPECT_NO_THROW(api_error_body(invalid_request("bad \xff byte")));
}

// ---- responses ----

std::string_view fake_piece(int32_t id) {
  static const std::map<int32_t, std::string> pieces{{1, "Hel"}, {2, "lo"}, {3, " world"}, {4, "\xe4"}};
  auto it = pieces.find(id);
  return it == pieces.end() ? std::string_view() : std::string_view(it->second);
}

std::vector<TokenLogprob> sample_logprobs() {
  return {TokenLogprob{1, -0.1f, {{1, -0.1f}, {3, -2.5f}}},
          TokenLogprob{2, -1.0f, {{3, -0.5f}, {2, -1.0f}}},
          TokenLogprob{4, -std::numeric_limits<float>::infinity(), {}}};
}

TEST(Logprobs, ChatShape) {
  Json j = chat_logprobs_json(sample_logprobs(), fake_piece);
  ASSERT_TRUE(j.contains("content"));
  const Json& c = j["content"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["token"], "Hel");
  EXPECT_NEAR(c[0]["logprob"].get<double>(), -0.1, 1e-6);
  EXPECT_EQ(c[0]["bytes"], Json::array({72, 101, 108}));
  ASSERT_EQ(c[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c[0]["top_logprobs"][1]["token"], " world");
  EXPECT_NEAR(c[0]["top_logprobs"][1]["logprob"].get<double>(), -2.5, 1e-6);
  EXPECT_EQ(c[0]["top_logprobs"][1]["bytes"].size(), 6u);
  EXPECT_DOUBLE_EQ(c[2]["logprob"].get<double>(), kMinLogprob);  // -inf is not JSON
  EXPECT_EQ(c[2]["bytes"], Json::array({0xe4}));
  EXPECT_TRUE(c[2]["top_logprobs"].is_array());
  EXPECT_NO_THROW(dump_json(j));  // a lone UTF-8 byte in "token" serializes
}

TEST(Logprobs, CompletionShapeAndTextOffset) {
  int64_t offset = 0;
  auto lps = sample_logprobs();
  Json j = completion_logprobs_json(std::span(lps).first(2), fake_piece, offset);
  EXPECT_EQ(j["tokens"], Json::array({"Hel", "lo"}));
  ASSERT_EQ(j["token_logprobs"].size(), 2u);
  EXPECT_NEAR(j["token_logprobs"][1].get<double>(), -1.0, 1e-6);
  ASSERT_EQ(j["top_logprobs"].size(), 2u);
  EXPECT_TRUE(j["top_logprobs"][0].is_object());
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);  // "Hel" (chosen, also top) and " world"
  EXPECT_TRUE(j["top_logprobs"][1].contains("lo"));  // the chosen token is always listed
  EXPECT_TRUE(j["top_logprobs"][1].contains(" world"));
  EXPECT_EQ(j["text_offset"], Json::array({0, 3}));
  EXPECT_EQ(offset, 5);
  // A stream continues the offsets.
  Json k = completion_logprobs_json(std::span(lps).subspan(2), fake_piece, offset);
  EXPECT_EQ(k["text_offset"], Json::array({5}));
  EXPECT_DOUBLE_EQ(k["token_logprobs"][0].get<double>(), kMinLogprob);
}

TEST(Responses, ChatCompletionBody) {
  ResponseMeta meta{"chatcmpl-abc", "served", 1700000000};
  std::vector<ChoiceResult> choices(2);
  choices[0].text = "Hello";
  choices[0].finish = EventFinish::kEos;
  choices[0].usage = {10, 3, 4};
  choices[1].text = "Hi there";
  choices[1].finish = EventFinish::kLength;
  choices[1].usage = {10, 5, 8};
  UsageTotals u;
  for (size_t i = 0; i < choices.size(); ++i) add_choice_usage(u, choices[i].usage, i == 0);
  EXPECT_EQ(u.prompt_tokens, 10);  // counted once
  EXPECT_EQ(u.completion_tokens, 8);
  EXPECT_EQ(u.cached_tokens, 4);
  Json j = chat_completion_json(meta, choices, u, false, fake_piece);
  EXPECT_EQ(j["id"], "chatcmpl-abc");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "served");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["usage"]["total_tokens"], 18);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);

  choices[0].logprobs = sample_logprobs();
  Json c = completion_json({"cmpl-x", "served", 1}, choices, u, true, fake_piece);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "Hello");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(c["choices"][1]["logprobs"]["tokens"].size(), 0u);
}

TEST(Responses, StreamChunksAndSse) {
  ResponseMeta meta{"chatcmpl-1", "m", 5};
  Json first = chat_chunk_json(meta, 0, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr, true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  ASSERT_TRUE(first.contains("usage"));
  EXPECT_TRUE(first["usage"].is_null());
  Json last = chat_chunk_json(meta, 1, Json::object(), nullptr, "stop", false);
  EXPECT_FALSE(last.contains("usage"));
  EXPECT_EQ(last["choices"][0]["index"], 1);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["choices"][0]["delta"].is_object());
  EXPECT_TRUE(last["choices"][0]["delta"].empty());

  Json tc = completion_chunk_json({"cmpl-1", "m", 5}, 0, "abc", nullptr, nullptr, false);
  EXPECT_EQ(tc["object"], "text_completion");
  EXPECT_EQ(tc["choices"][0]["text"], "abc");

  UsageTotals u{7, 3, 0};
  Json uc = usage_chunk_json(meta, true, u);
  EXPECT_TRUE(uc["choices"].is_array());
  EXPECT_TRUE(uc["choices"].empty());
  EXPECT_EQ(uc["usage"]["total_tokens"], 10);
  EXPECT_EQ(uc["object"], "chat.completion.chunk");

  const std::string ev = sse_event(first);
  ASSERT_GE(ev.size(), 8u);
  EXPECT_EQ(ev.substr(0, 6), "data: ");
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_EQ(ev.find('\n'), ev.size() - 2);  // one line: no newline inside the JSON
  EXPECT_EQ(Json::parse(ev.substr(6)), first);
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Responses, RandomIds) {
  const std::string a = random_hex_id("chatcmpl-"), b = random_hex_id("chatcmpl-");
  EXPECT_EQ(a.substr(0, 9), "chatcmpl-");
  EXPECT_EQ(a.size(), 9u + 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 9), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_GT(unix_seconds_now(), 1600000000);
}

// ---- metrics ----

// Parses "name{labels} value" lines of one metric family into (labels → value).
std::map<std::string, double> samples(const std::string& text, const std::string& name) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    if (line.substr(0, brace) != name) continue;
    const size_t close = line.find('}');
    out[line.substr(brace + 1, close - brace - 1)] = std::stod(line.substr(close + 2));
  }
  return out;
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 0.5, 1.0});
  for (double v : {0.05, 0.1, 0.3, 0.7, 0.9, 5.0}) h.observe(v);
  std::string out;
  h.render(out, "x:lat", "model_name=\"m\"");
  auto b = samples(out, "x:lat_bucket");
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b["model_name=\"m\",le=\"0.1\""], 2);  // le: 0.1 itself counts in the 0.1 bucket
  EXPECT_EQ(b["model_name=\"m\",le=\"0.5\""], 3);
  EXPECT_EQ(b["model_name=\"m\",le=\"1\""], 5);
  EXPECT_EQ(b["model_name=\"m\",le=\"+Inf\""], 6);
  EXPECT_NEAR(samples(out, "x:lat_sum")["model_name=\"m\""], 7.05, 1e-9);
  EXPECT_EQ(samples(out, "x:lat_count")["model_name=\"m\""], 6);
  // Bucket order in the text ascends and counts never decrease.
  double prev = -1;
  size_t at = 0;
  while ((at = out.find("x:lat_bucket", at)) != std::string::npos) {
    const size_t sp = out.find(' ', out.find('}', at));
    const double v = std::stod(out.substr(sp + 1));
    EXPECT_GE(v, prev);
    prev = v;
    at = sp;
  }
}

TEST(Metrics, ServerMetricsText) {
  ServerMetrics m("my \"model\"");
  m.observe_ttft(0.03);
  m.observe_inter_token(0.02);
  m.observe_inter_token(0.02);
  m.observe_e2e(1.2);
  m.observe_queue(0.001);
  m.count_http_response(200);
  m.count_http_response(200);
  m.count_http_response(429);
  m.http_request_begin();

  const std::string loading = m.render(nullptr);
  const std::string label = "model_name=\"my \\\"model\\\"\"";
  EXPECT_NE(loading.find("# TYPE hindsight:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_EQ(samples(loading, "hindsight:time_to_first_token_seconds_count")[label], 1);
  EXPECT_EQ(samples(loading, "hindsight:inter_token_latency_seconds_count")[label], 2);
  EXPECT_EQ(samples(loading, "hindsight:e2e_request_latency_seconds_count")[label], 1);
  EXPECT_EQ(samples(loading, "hindsight:request_queue_time_seconds_count")[label], 1);
  EXPECT_EQ(samples(loading, "hindsight:time_to_first_token_seconds_bucket")[label + ",le=\"0.04\""], 1);
  EXPECT_EQ(samples(loading, "hindsight:time_to_first_token_seconds_bucket")[label + ",le=\"0.02\""], 0);
  EXPECT_EQ(samples(loading, "hindsight:http_requests_total")[label + ",status=\"200\""], 2);
  EXPECT_EQ(samples(loading, "hindsight:http_requests_total")[label + ",status=\"429\""], 1);
  EXPECT_EQ(samples(loading, "hindsight:http_requests_active")[label], 1);
  EXPECT_EQ(loading.find("hindsight:num_requests_running"), std::string::npos);  // no engine yet

  EngineStats s;
  s.running = 2;
  s.waiting = 3;
  s.kv_pages_total = 200;
  s.kv_pages_used = 50;
  s.kv_pages_cached = 7;
  s.prompt_tokens_total = 1000;
  s.generation_tokens_total = 300;
  s.prefix_cache_queries = 1000;
  s.prefix_cache_hits = 250;
  s.steps_total = 99;
  s.preemptions_total = 1;
  s.requests_finished[static_cast<int>(EventFinish::kStop)] = 2;
  s.requests_finished[static_cast<int>(EventFinish::kEos)] = 3;
  s.requests_finished[static_cast<int>(EventFinish::kLength)] = 4;
  s.requests_finished[static_cast<int>(EventFinish::kCancelled)] = 1;
  s.requests_finished[static_cast<int>(EventFinish::kTimeout)] = 1;
  s.kv_fetch_hits = 900;
  s.kv_fetch_misses = 100;
  s.kv_fetch_bytes = 100 * 4096;
  s.kv_fetch_evictions = 40;
  s.device_slots_total = 800;
  s.device_slots_used = 200;
  s.kv_leases_live = 2;
  s.state_slots_total = 16;
  s.state_slots_used = 3;
  s.state_checkpoints_used = 5;
  s.state_checkpoint_saves = 11;
  s.state_checkpoint_restores = 4;
  const std::string t = m.render(&s);
  EXPECT_DOUBLE_EQ(samples(t, "hindsight:kv_cache_usage_perc")[label + ",tier=\"device\""], 0.25);
  EXPECT_EQ(samples(t, "hindsight:kv_fetch_hits_total")[label], 900);
  EXPECT_EQ(samples(t, "hindsight:kv_fetch_misses_total")[label], 100);
  EXPECT_EQ(samples(t, "hindsight:kv_fetch_bytes_total")[label], 409600);
  EXPECT_EQ(samples(t, "hindsight:kv_fetch_evictions_total")[label], 40);
  EXPECT_EQ(samples(t, "hindsight:kv_leases_live")[label], 2);
  EXPECT_EQ(samples(t, "hindsight:state_slots_total")[label], 16);
  EXPECT_EQ(samples(t, "hindsight:state_slots_used")[label], 3);
  EXPECT_EQ(samples(t, "hindsight:state_checkpoints_used")[label], 5);
  EXPECT_EQ(samples(t, "hindsight:state_checkpoint_saves_total")[label], 11);
  EXPECT_EQ(samples(t, "hindsight:state_checkpoint_restores_total")[label], 4);
  EXPECT_NE(t.find("# TYPE hindsight:kv_fetch_bytes_total counter"), std::string::npos);
  EXPECT_EQ(samples(t, "hindsight:num_requests_running")[label], 2);
  EXPECT_EQ(samples(t, "hindsight:num_requests_waiting")[label], 3);
  EXPECT_DOUBLE_EQ(samples(t, "hindsight:kv_cache_usage_perc")[label + ",tier=\"host\""], 0.25);
  EXPECT_EQ(samples(t, "hindsight:kv_pages_used")[label], 50);
  EXPECT_EQ(samples(t, "hindsight:kv_pages_total")[label], 200);
  EXPECT_EQ(samples(t, "hindsight:kv_pages_cached")[label], 7);
  EXPECT_EQ(samples(t, "hindsight:prompt_tokens_total")[label], 1000);
  EXPECT_EQ(samples(t, "hindsight:generation_tokens_total")[label], 300);
  EXPECT_EQ(samples(t, "hindsight:prefix_cache_queries_total")[label], 1000);
  EXPECT_EQ(samples(t, "hindsight:prefix_cache_hits_total")[label], 250);
  EXPECT_EQ(samples(t, "hindsight:num_preemptions_total")[label], 1);
  EXPECT_EQ(samples(t, "hindsight:engine_steps_total")[label], 99);
  auto fin = samples(t, "hindsight:request_success_total");
  EXPECT_EQ(fin[label + ",finished_reason=\"stop\""], 5);  // stop string + end of generation
  EXPECT_EQ(fin[label + ",finished_reason=\"length\""], 4);
  EXPECT_EQ(fin[label + ",finished_reason=\"abort\""], 2);
  EXPECT_EQ(fin[label + ",finished_reason=\"error\""], 0);
  EXPECT_NE(t.find("# TYPE hindsight:prompt_tokens_total counter"), std::string::npos);
  EXPECT_NE(t.find("# TYPE hindsight:num_requests_running gauge"), std::string::npos);
  m.http_request_end();
  EXPECT_EQ(m.http_requests_active(), 0);
}

TEST(Metrics, LabelEscaping) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_label_value("plain"), "plain");
}

}  // namespace
}  // namespace hs::server
