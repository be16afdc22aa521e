// Tokenizer: the text <-> token id pipeline that a Hugging Face `tokenizer.json` describes.
//
// Supported (what Llama 3 / GPT-2 style byte-level BPE and Gemma / Llama 2 style SentencePiece BPE use):
//   added tokens        split out of the raw text first (leftmost-longest), lstrip / rstrip honoured
//   normalizer          Replace (string or regex), Prepend, NFC/NFKC/NFD/NFKD, Strip, Lowercase, Sequence
//   pre_tokenizer       Split (regex or string, all behaviours, invert), ByteLevel, Metaspace, Digits,
//                       WhitespaceSplit, Sequence
//   model               BPE: merge ranks, ignore_merges, byte_fallback (<0xXX>), unk / fuse_unk, end_of_word_suffix
//   post_processor      TemplateProcessing, ByteLevel, Bert/RobertaProcessing, Sequence (add_special adds
//                       what the template adds)
//   decoder             ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
//
// Regexes run on PCRE2 (rewritten from the Oniguruma dialect of tokenizer.json), Unicode normalization on
// ICU. Checked id for id against Hugging Face's JavaScript tokenizers (tests/tokenizer/node).
// All text is UTF-8. encode() rejects invalid UTF-8 with flashkit::Error naming the byte offset; decode()
// replaces byte sequences that are not valid UTF-8 with U+FFFD.
//
// Threads: a Tokenizer is immutable after loading. Its const members (encode, decode, stream_decoder, the
// queries) may run on any number of threads at once and give the same results as on one (the internal word
// cache is locked per shard). Destroying or move-assigning it while another thread is inside a call is a data
// race, as for any C++ object: the owner must outlive the calls. (The C API's fk_tokenizer_free, and so Python's
// Tokenizer.close(), is safe during calls: the handle is reference-counted, the tokenizer destroyed when the
// last call returns, and a call started after the free fails cleanly.) A StreamDecoder is one stream's state:
// one thread at a time, and its Tokenizer must outlive it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashkit {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json (BOS/EOS names, chat template).
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // The tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*: llama.cpp's gpt2 byte-level BPE or llama
  // SentencePiece vocabularies, special ids, add_bos_token, tokenizer.chat_template).
  static Tokenizer from_gguf(const std::filesystem::path& file);
  // Whether a GGUF file carries a tokenizer (tokenizer.ggml.model present and not "none" / "no_vocab"); reads only
  // the header. Throws invalid_argument when the file is not a readable GGUF.
  static bool gguf_has_tokenizer(const std::filesystem::path& file);
  // A model's tokenizer: DIR/tokenizer.json when there is one (for a .gguf file: beside it), else the tokenizer
  // embedded in a .gguf file; throws invalid_argument when neither exists (from_dir's error).
  static Tokenizer for_model(const std::filesystem::path& dir_or_gguf);
  // The texts of the two files; tokenizer_config_json may be empty.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. add_special: also what the post-processor adds (e.g. BOS). Throws flashkit::Error
  // (invalid_argument) on invalid UTF-8, naming the byte offset.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Text of `ids`; skip_special drops special tokens (BOS, EOS, <start_of_turn>, ...). Throws on an id
  // outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Incremental detokenization for generation: push() returns the text that became final with this id,
  // never a partial UTF-8 sequence (bytes of a character split across byte tokens are held back until
  // complete). flush() returns what is held back (an incomplete sequence as U+FFFD). An id the tokenizer
  // does not have (a model's embedding may be padded past vocab_size()) yields nothing instead of throwing.
  class StreamDecoder {
   public:
    StreamDecoder(StreamDecoder&&) noexcept;
    StreamDecoder& operator=(StreamDecoder&&) noexcept;
    ~StreamDecoder();
    std::string push(int32_t id);
    std::string flush();
    void reset();  // start a new stream (the next token counts as the first again)

   private:
    friend class Tokenizer;
    struct State;
    explicit StreamDecoder(std::unique_ptr<State> s);
    std::unique_ptr<State> s_;
  };
  StreamDecoder stream_decoder(bool skip_special = true) const;

  // Number of ids: model vocabulary plus added tokens (max id + 1).
  int32_t vocab_size() const;
  std::optional<int32_t> token_id(std::string_view token) const;  // exact token string (vocab or added)
  std::string token_text(int32_t id) const;                       // raw token string ("Ġthe", "▁the", "<0x0A>")
  std::optional<int32_t> bos_id() const;
  std::vector<int32_t> eos_ids() const;  // eos_token of tokenizer_config.json (+ end-of-text tokens), no dups
  std::optional<int32_t> pad_id() const;
  bool is_special(int32_t id) const;     // an added token marked "special"
  std::string bos_token() const;         // "" if none
  std::string eos_token() const;         // "" if none
  std::string chat_template() const;     // raw Jinja text of tokenizer_config.json ("" if none)
  bool add_bos_by_default() const;       // what the post-processor / config adds at the front with add_special

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashkit
