// The tokenizer a GGUF file carries (tokenizer.ggml.* metadata, as llama.cpp's converter writes it) turned into the
// tokenizer.json / tokenizer_config.json pair flashkit's Tokenizer reads, so one .gguf file is a whole model.
//   model "gpt2"  (byte-level BPE): tokens + merges; the pre-tokenizer regex from tokenizer.ggml.pre
//                 (llama-bpe / llama3, qwen2, gpt2, default); ignore_merges for llama-bpe, as llama.cpp does.
//   model "llama" (SentencePiece BPE): tokens + scores; the merges are derived from the scores (a pair merges with
//                 the score of the piece it makes, higher first, as SentencePiece does), byte fallback (<0xNN>
//                 tokens), "▁" for spaces, one prepended unless tokenizer.ggml.add_space_prefix is false (Gemma).
// Token types (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte): control tokens become special
// added tokens, user-defined ones plain added tokens. bos/eos/unk/pad ids, add_bos_token and the chat template go
// to tokenizer_config.json. Every value is checked (types, lengths, ids in range): errors name the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace flashkit::tokenizer {

// {tokenizer.json text, tokenizer_config.json text} from a GGUF file's metadata; `label` names the file in errors.
std::pair<std::string, std::string> gguf_tokenizer_files(const nlohmann::json& metadata, const std::string& label);

// The pre-tokenizer regex for a tokenizer.ggml.pre name; throws unsupported for names flashkit does not map.
std::string gguf_pre_regex(const std::string& pre, const std::string& label);

}  // namespace flashkit::tokenizer
