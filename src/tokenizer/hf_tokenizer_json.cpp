// tokenizer/hf_tokenizer_json.cpp — see hf_tokenizer_json.h.
#include "tokenizer/hf_tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace hs::tok {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The split regexes of the published tokenizer.json files, byte for byte.
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen35Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Result<json> read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(StatusCode::kIoError, "cannot read {}", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(StatusCode::kCorrupt, "{}: not valid JSON", path.string());
  return j;
}

std::string brief(const json& j) {
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

bool is_type(const json& j, const char* type) { return j.is_object() && j.value("type", "") == type; }

// The `pre` name of a tokenizer.json pre-tokenizer, or an error quoting it.
Result<std::string> pre_name(const json& pre, const std::string& where) {
  auto byte_level = [](const json& j, bool use_regex) {
    return is_type(j, "ByteLevel") && j.value("use_regex", true) == use_regex && !j.value("add_prefix_space", false);
  };
  if (byte_level(pre, true)) return std::string("gpt2");
  if (is_type(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const json& a = pre["pretokenizers"][0];
    const json& b = pre["pretokenizers"][1];
    if (is_type(a, "Digits") && a.value("individual_digits", false) && byte_level(b, true))
      return std::string("smollm");
    if (is_type(a, "Split") && byte_level(b, false) && a.value("behavior", "") == "Isolated" &&
        !a.value("invert", false) && a.contains("pattern") && a["pattern"].is_object() &&
        a["pattern"].contains("Regex") && a["pattern"]["Regex"].is_string()) {
      const std::string re = a["pattern"]["Regex"].get<std::string>();
      if (re == kQwen2Regex) return std::string("qwen2");
      if (re == kQwen35Regex) return std::string("qwen35");
      if (re == kLlama3Regex) return std::string("llama3");
    }
  }
  return make_error(StatusCode::kUnsupported,
                    "{}: pre_tokenizer {} is not one hindsight implements (byte-level GPT-2, SmolLM's digits, "
                    "the Qwen2 / Qwen3.5 / Llama 3 split regexes)",
                    where, brief(pre));
}

// llama.cpp's converter (does_token_look_special) makes these added tokens control even when
// tokenizer.json does not mark them special (Qwen2.5's <|fim_prefix|>, <|repo_name|>, ...).
bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

// Whether the post-processor puts a special token first (Llama 3's TemplateProcessing, alone
// or inside a Sequence; Qwen's ByteLevel post-processor adds nothing).
bool post_adds_bos(const json& post) {
  if (is_type(post, "TemplateProcessing"))
    return post.contains("single") && post["single"].is_array() && !post["single"].empty() &&
           post["single"][0].is_object() && post["single"][0].contains("SpecialToken");
  if (is_type(post, "Sequence") && post.contains("processors") && post["processors"].is_array())
    for (const json& p : post["processors"])
      if (post_adds_bos(p)) return true;
  return false;
}

// A token field of tokenizer_config.json: "text", {"content": "text"} or null.
std::optional<std::string> token_text(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

static Result<bool> write_impl(const std::string& dir, int64_t n_vocab, gguf::GgufBuilder& b) {
  std::error_code ec;
  const fs::path tj = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(tj, ec)) return false;
  const std::string where = tj.string();
  HS_ASSIGN_OR_RETURN(json t, read_json(tj));
  if (!t.is_object() || !t.contains("model") || !t["model"].is_object())
    return make_error(StatusCode::kCorrupt, "{}: no \"model\" object", where);
  const json& model = t["model"];
  if (model.value("type", "") != "BPE")
    return make_error(StatusCode::kUnsupported, "{}: model type '{}' is not supported (byte-level BPE only)", where,
                      model.value("type", "?"));
  if (model.value("byte_fallback", false))
    return make_error(StatusCode::kUnsupported, "{}: a BPE with byte_fallback (SentencePiece-style) is not supported "
                      "from tokenizer.json; use the model's GGUF", where);
  const json pre_j = t.value("pre_tokenizer", json());
  HS_ASSIGN_OR_RETURN(std::string pre, pre_name(pre_j, where));
  const json norm = t.value("normalizer", json());
  const bool nfc = is_type(norm, "NFC");
  if (!norm.is_null() && !nfc)
    return make_error(StatusCode::kUnsupported, "{}: normalizer {} is not supported (none or NFC)", where, brief(norm));
  if (nfc != pre_tokenizer_wants_nfc(pre))
    return make_error(StatusCode::kUnsupported, "{}: an {} normalizer with the '{}' pre-tokenizer is not supported",
                      where, nfc ? "NFC" : "absent", pre);
  if (!is_type(t.value("decoder", json()), "ByteLevel"))
    return make_error(StatusCode::kUnsupported, "{}: decoder {} is not ByteLevel", where,
                      brief(t.value("decoder", json())));

  // Tokens: the vocabulary, then the added tokens, padded to the model's size.
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return make_error(StatusCode::kCorrupt, "{}: model.vocab is not an object", where);
  std::vector<std::pair<int64_t, std::string>> entries;  // (id, text)
  std::vector<TokenType> entry_types;
  int64_t max_id = -1;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 24))
      return make_error(StatusCode::kCorrupt, "{}: model.vocab['{}'] is not a token id", where, text);
    entries.emplace_back(id.get<int64_t>(), text);
    entry_types.push_back(TokenType::kNormal);
    max_id = std::max(max_id, id.get<int64_t>());
  }
  if (t.contains("added_tokens")) {
    if (!t["added_tokens"].is_array()) return make_error(StatusCode::kCorrupt, "{}: added_tokens is not a list", where);
    for (const json& a : t["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() >= (int64_t{1} << 24))
        return make_error(StatusCode::kCorrupt, "{}: added token {} has no valid id and content", where, brief(a));
      const std::string content = a["content"].get<std::string>();
      entries.emplace_back(a["id"].get<int64_t>(), content);
      entry_types.push_back(a.value("special", false) || looks_special(content) ? TokenType::kControl
                                                                                 : TokenType::kUserDefined);
      max_id = std::max(max_id, a["id"].get<int64_t>());
    }
  }
  if (n_vocab > 0 && max_id >= n_vocab)
    return make_error(StatusCode::kCorrupt, "{}: token id {} is past the model's {} embedding rows", where, max_id,
                      n_vocab);
  const int64_t n = std::max(n_vocab, max_id + 1);
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), static_cast<int32_t>(TokenType::kUnused));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  std::unordered_map<std::string, int64_t> id_of;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [id, text] = entries[i];
    // An added token that repeats its vocabulary entry (same id, same text) is that entry.
    if (seen[id] && tokens[id] != text)
      return make_error(StatusCode::kCorrupt, "{}: id {} is both '{}' and '{}'", where, id, tokens[id], text);
    if (const auto it = id_of.find(text); it != id_of.end() && it->second != id)
      return make_error(StatusCode::kCorrupt, "{}: '{}' is both id {} and id {}", where, text, it->second, id);
    seen[id] = true;
    tokens[id] = text;
    if (entry_types[i] != TokenType::kNormal || types[id] == static_cast<int32_t>(TokenType::kUnused))
      types[id] = static_cast<int32_t>(entry_types[i]);
    id_of[text] = id;
  }
  for (int64_t i = 0; i < n; ++i)
    if (!seen[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";

  std::vector<std::string> merges;
  if (!model.contains("merges") || !model["merges"].is_array())
    return make_error(StatusCode::kCorrupt, "{}: model.merges is not a list", where);
  merges.reserve(model["merges"].size());
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return make_error(StatusCode::kCorrupt, "{}: merge {} is not two tokens", where, brief(m));
    }
  }

  // tokenizer_config.json: special tokens, add_bos_token, the chat template.
  json cfg = json::object();
  const fs::path cj = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(cj, ec)) {
    HS_ASSIGN_OR_RETURN(cfg, read_json(cj));
    if (!cfg.is_object()) return make_error(StatusCode::kCorrupt, "{}: not a JSON object", cj.string());
  }
  b.kv_str("tokenizer.ggml.model", "gpt2");
  b.kv_str("tokenizer.ggml.pre", pre);
  b.kv_str_array("tokenizer.ggml.tokens", tokens);
  b.kv_i32_array("tokenizer.ggml.token_type", types);
  b.kv_str_array("tokenizer.ggml.merges", merges);
  for (const auto& [field, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                                   std::pair{"eos_token", "tokenizer.ggml.eos_token_id"},
                                   std::pair{"pad_token", "tokenizer.ggml.padding_token_id"},
                                   std::pair{"unk_token", "tokenizer.ggml.unknown_token_id"}}) {
    const auto text = token_text(cfg, field);
    if (!text) continue;
    const auto it = id_of.find(*text);
    if (it == id_of.end())
      return make_error(StatusCode::kCorrupt, "{}: {} '{}' is not a token of tokenizer.json", cj.string(), field, *text);
    b.kv_u32(key, static_cast<uint32_t>(it->second));
  }
  // add_bos_token, else what the post-processor does (Llama 3's TemplateProcessing puts its BOS
  // first; Qwen's has none).
  const json add_bos = cfg.value("add_bos_token", json(post_adds_bos(t.value("post_processor", json()))));
  if (!add_bos.is_boolean()) return make_error(StatusCode::kCorrupt, "{}: add_bos_token is not a boolean", cj.string());
  b.kv_bool("tokenizer.ggml.add_bos_token", add_bos.get<bool>());

  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    std::ifstream in(jinja, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) return make_error(StatusCode::kIoError, "cannot read {}", jinja.string());
    b.kv_str("tokenizer.chat_template", ss.str());
  } else if (cfg.contains("chat_template")) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      b.kv_str("tokenizer.chat_template", ct.get<std::string>());
    } else if (ct.is_array()) {
      for (const json& e : ct) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
            !e["template"].is_string())
          return make_error(StatusCode::kCorrupt, "{}: chat_template entry {} has no name and template", cj.string(),
                            brief(e));
        const std::string name = e["name"].get<std::string>();
        b.kv_str(name == "default" ? std::string("tokenizer.chat_template") : "tokenizer.chat_template." + name,
                 e["template"].get<std::string>());
      }
    } else if (!ct.is_null()) {
      return make_error(StatusCode::kCorrupt, "{}: chat_template is neither text nor a list", cj.string());
    }
  }
  return true;
}

Result<bool> write_hf_tokenizer(const std::string& dir, int64_t n_vocab, gguf::GgufBuilder& b) {
  // nlohmann's typed accessors throw on a field of the wrong type ("special": "yes"); a malformed
  // file is an error, never a crash.
  try {
    return write_impl(dir, n_vocab, b);
  } catch (const json::exception& e) {
    return make_error(StatusCode::kCorrupt, "{}/tokenizer.json or tokenizer_config.json: {}", dir, e.what());
  } catch (const std::bad_alloc&) {
    return make_error(StatusCode::kIoError, "{}: out of memory reading the tokenizer", dir);
  }
}

}  // namespace hs::tok
