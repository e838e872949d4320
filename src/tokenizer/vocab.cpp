// tokenizer/vocab.cpp — reading and checking tokenizer vocabularies from GGUF metadata.
//
// Defaults follow llama.cpp where a key is absent: add_bos is true for SentencePiece
// vocabularies and false for byte-level BPE, add_space_prefix is true for SentencePiece.
// End-of-turn tokens are found by their text among control/user-defined tokens when the file
// does not name them, as llama.cpp does. Cost: linear in the vocabulary, once per model.
#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>
#include <span>
#include <string_view>

#include "formats/gguf.h"

namespace hs {
namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";

// Texts that mark the end of a turn in the chat formats we know, in priority order for eot_id.
constexpr std::array<std::string_view, 12> kEotTexts = {
    "<|eot_id|>",     "<|im_end|>",  "<end_of_turn>", "<|end|>",        "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",      "_<EOT>",        "<|return|>",     "<|call|>",
    "<|eom_id|>",     "<｜end▁of▁sentence｜>",
};

// Optional id key: -1 when absent or explicitly unset (-1 / 0xFFFFFFFF).
Result<int32_t> read_id(const gguf::File& f, std::string_view key, int32_t n_tokens) {
  if (!f.has(key)) return -1;
  HS_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  if (v == -1 || v == 0xFFFFFFFFll) return -1;
  if (v < 0 || v >= n_tokens)
    return make_error(StatusCode::kCorrupt, "{} = {} is outside the vocabulary of {} tokens", key,
                      v, n_tokens);
  return static_cast<int32_t>(v);
}

Status check_id(std::string_view name, int32_t id, int32_t n_tokens) {
  if (id < -1 || id >= n_tokens)
    return make_error(StatusCode::kCorrupt, "{} = {} is outside the vocabulary of {} tokens", name,
                      id, n_tokens);
  return Status::ok();
}

}  // namespace

const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::kUndefined: return "undefined";
    case TokenType::kNormal: return "normal";
    case TokenType::kUnknown: return "unknown";
    case TokenType::kControl: return "control";
    case TokenType::kUserDefined: return "user_defined";
    case TokenType::kUnused: return "unused";
    case TokenType::kByte: return "byte";
  }
  return "?";
}

Result<Vocab> load_vocab(const gguf::File& f) {
  Vocab v;
  HS_ASSIGN_OR_RETURN(std::string_view model, f.get_string(kModelKey));
  v.model_name = std::string(model);
  if (model == "gpt2") {
    v.model = VocabModel::kBytePairBpe;
  } else if (model == "llama") {
    v.model = VocabModel::kSentencePiece;
  } else {
    return make_error(StatusCode::kUnsupported,
                      "{} = '{}' is not supported (supported: 'gpt2' byte-level BPE, 'llama' "
                      "SentencePiece BPE)",
                      kModelKey, model);
  }
  if (f.has("tokenizer.ggml.pre")) {
    HS_ASSIGN_OR_RETURN(std::string_view pre, f.get_string("tokenizer.ggml.pre"));
    v.pre = std::string(pre);
  }
  if (f.has("general.architecture")) {
    HS_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
    v.architecture = std::string(arch);
  }

  HS_ASSIGN_OR_RETURN(std::span<const std::string_view> tokens, f.get_string_array(kTokensKey));
  if (tokens.empty()) return make_error(StatusCode::kCorrupt, "{} is empty", kTokensKey);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return make_error(StatusCode::kCorrupt, "{} has {} tokens, more than int32 ids can name",
                      kTokensKey, tokens.size());
  v.tokens.reserve(tokens.size());
  for (std::string_view t : tokens) v.tokens.emplace_back(t);
  const auto n = static_cast<int32_t>(v.tokens.size());

  if (f.has("tokenizer.ggml.scores")) {
    HS_ASSIGN_OR_RETURN(v.scores, f.get_float_array("tokenizer.ggml.scores"));
    if (v.scores.size() != v.tokens.size())
      return make_error(StatusCode::kCorrupt,
                        "tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}",
                        v.scores.size(), v.tokens.size());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    HS_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != v.tokens.size())
      return make_error(StatusCode::kCorrupt,
                        "tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}",
                        types.size(), v.tokens.size());
    v.types.resize(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte))
        return make_error(StatusCode::kCorrupt,
                          "tokenizer.ggml.token_type[{}] = {} is not a known token type (0..6)",
                          i, types[i]);
      v.types[i] = static_cast<TokenType>(types[i]);
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    HS_ASSIGN_OR_RETURN(std::span<const std::string_view> merges,
                        f.get_string_array("tokenizer.ggml.merges"));
    v.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string_view m = merges[i];
      // Split at the first space after the first character, as llama.cpp does.
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      if (sp == std::string_view::npos || sp + 1 >= m.size())
        return make_error(StatusCode::kCorrupt,
                          "tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space",
                          i, m);
      v.merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
    }
  } else if (v.model == VocabModel::kBytePairBpe) {
    return make_error(StatusCode::kNotFound,
                      "tokenizer.ggml.merges is missing: a byte-level BPE vocabulary needs merges");
  }

  HS_ASSIGN_OR_RETURN(v.bos_id, read_id(f, "tokenizer.ggml.bos_token_id", n));
  HS_ASSIGN_OR_RETURN(v.eos_id, read_id(f, "tokenizer.ggml.eos_token_id", n));
  HS_ASSIGN_OR_RETURN(v.unk_id, read_id(f, "tokenizer.ggml.unknown_token_id", n));
  HS_ASSIGN_OR_RETURN(v.pad_id, read_id(f, "tokenizer.ggml.padding_token_id", n));
  HS_ASSIGN_OR_RETURN(v.eot_id, read_id(f, "tokenizer.ggml.eot_token_id", n));
  HS_ASSIGN_OR_RETURN(v.eom_id, read_id(f, "tokenizer.ggml.eom_token_id", n));

  const bool spm = v.model == VocabModel::kSentencePiece;
  HS_ASSIGN_OR_RETURN(v.add_bos, f.get_bool_or("tokenizer.ggml.add_bos_token", spm));
  HS_ASSIGN_OR_RETURN(v.add_eos, f.get_bool_or("tokenizer.ggml.add_eos_token", false));
  HS_ASSIGN_OR_RETURN(v.add_space_prefix, f.get_bool_or("tokenizer.ggml.add_space_prefix", spm));
  const bool gemma = spm && v.architecture.starts_with("gemma");
  v.merge_order = gemma ? MergeOrder::kByPosition : MergeOrder::kByScore;
  v.respell_space_tokens = gemma;

  HS_RETURN_IF_ERROR(prepare_vocab(v));
  return v;
}

Status prepare_vocab(Vocab& v) {
  const int32_t n = v.n_tokens();
  if (n == 0) return make_error(StatusCode::kInvalidArgument, "vocabulary has no tokens");
  if (v.types.empty()) v.types.assign(v.tokens.size(), TokenType::kNormal);
  if (v.types.size() != v.tokens.size())
    return make_error(StatusCode::kCorrupt, "vocabulary has {} token types for {} tokens",
                      v.types.size(), v.tokens.size());
  if (!v.scores.empty() && v.scores.size() != v.tokens.size())
    return make_error(StatusCode::kCorrupt, "vocabulary has {} scores for {} tokens",
                      v.scores.size(), v.tokens.size());
  HS_RETURN_IF_ERROR(check_id("bos_token_id", v.bos_id, n));
  HS_RETURN_IF_ERROR(check_id("eos_token_id", v.eos_id, n));
  HS_RETURN_IF_ERROR(check_id("unknown_token_id", v.unk_id, n));
  HS_RETURN_IF_ERROR(check_id("padding_token_id", v.pad_id, n));
  HS_RETURN_IF_ERROR(check_id("eot_token_id", v.eot_id, n));
  HS_RETURN_IF_ERROR(check_id("eom_token_id", v.eom_id, n));
  if (v.add_bos && v.bos_id < 0)
    return make_error(StatusCode::kCorrupt, "add_bos_token is set but there is no bos_token_id");
  if (v.add_eos && v.eos_id < 0)
    return make_error(StatusCode::kCorrupt, "add_eos_token is set but there is no eos_token_id");

  // End-of-generation ids: eos, eot, eom, and every control/user-defined token whose text is a
  // known end-of-turn marker (SmolLM2's <|endoftext|> and <|im_end|>, Gemma's <end_of_turn>).
  std::vector<int32_t> eog;
  int32_t found_eot = -1;
  size_t found_rank = kEotTexts.size();
  for (int32_t id = 0; id < n; ++id) {
    if (v.types[id] != TokenType::kControl && v.types[id] != TokenType::kUserDefined) continue;
    const auto it = std::find(kEotTexts.begin(), kEotTexts.end(), v.tokens[id]);
    if (it == kEotTexts.end()) continue;
    eog.push_back(id);
    const auto rank = static_cast<size_t>(it - kEotTexts.begin());
    if (rank < found_rank) {
      found_rank = rank;
      found_eot = id;
    }
  }
  if (v.eot_id < 0) v.eot_id = found_eot;
  for (int32_t id : {v.eos_id, v.eot_id, v.eom_id})
    if (id >= 0) eog.push_back(id);
  for (int32_t id : v.eog_ids) {  // keep ids a caller set
    if (id < 0 || id >= n)
      return make_error(StatusCode::kCorrupt, "eog id {} is outside the vocabulary of {} tokens",
                        id, n);
    eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  v.eog_ids = std::move(eog);
  return Status::ok();
}

}  // namespace hs
