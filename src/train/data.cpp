// Token files, batch sampling, prepare-data and the synthetic generators (see data.hpp / flashkit/train.hpp).
#include "train/data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "flashkit/error.hpp"
#include "flashkit/tokenizer.hpp"
#include "train/io.hpp"
#include "train/random.hpp"

namespace flashkit::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

constexpr char kMagic[8] = {'F', 'K', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr size_t kHeader = 32;

}  // namespace

TokenFile::TokenFile(const fs::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) bad(path.string() + ": cannot open the token file (make it with `flashkit prepare-data`)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path.string() + ": not a regular file");
  }
  map_bytes_ = size_t(st.st_size);
  if (map_bytes_ < kHeader) {
    ::close(fd);
    bad(path.string() + ": " + std::to_string(map_bytes_) + " bytes is too short for a token file (32-byte header)");
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    bad(path.string() + ": cannot memory-map");
  }
  const char* h = static_cast<const char*>(map_);
  uint32_t version, bpt, vocab;
  uint64_t n;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&bpt, h + 12, 4);
  std::memcpy(&n, h + 16, 8);
  std::memcpy(&vocab, h + 24, 4);
  std::string why;
  if (std::memcmp(h, kMagic, 8) != 0) why = "not a flashkit token file (no FKTOKENS magic)";
  else if (version != 1) why = "token file version " + std::to_string(version) + " (this build reads 1)";
  else if (bpt != 2 && bpt != 4) why = "bytes per token " + std::to_string(bpt) + " (expected 2 or 4)";
  else if (n > (map_bytes_ - kHeader) / bpt || kHeader + n * bpt != map_bytes_)
    why = "header says " + std::to_string(n) + " tokens of " + std::to_string(bpt) + " bytes but the file has " +
          std::to_string(map_bytes_) + " bytes (truncated?)";
  else if (vocab == 0) why = "vocabulary size 0";
  if (!why.empty()) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    bad(path.string() + ": " + why);
  }
  bpt_ = int(bpt);
  n_ = int64_t(n);
  vocab_ = vocab;
  ids_ = h + kHeader;
  // Every id inside the vocabulary the header states: the kernels index embedding rows with them unchecked.
  for (int64_t i = 0; i < n_; ++i)
    if (at(i) >= vocab_) {
      const int32_t bad_id = at(i);
      ::munmap(map_, map_bytes_);
      map_ = nullptr;
      bad(path.string() + ": token " + std::to_string(i) + " is " + std::to_string(bad_id) +
          ", outside the file's vocabulary of " + std::to_string(vocab_) + " (corrupt token file)");
    }
  ::madvise(map_, map_bytes_, MADV_RANDOM);
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

void write_token_file(const fs::path& path, const std::vector<int32_t>& ids, int64_t vocab_size) {
  if (vocab_size <= 0 || vocab_size > (int64_t(1) << 31)) bad("token file: vocabulary size out of range");
  const uint32_t bpt = vocab_size <= 65536 ? 2 : 4;
  char header[kHeader] = {};
  std::memcpy(header, kMagic, 8);
  const uint32_t version = 1, vocab = uint32_t(vocab_size);
  const uint64_t n = ids.size();
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &bpt, 4);
  std::memcpy(header + 16, &n, 8);
  std::memcpy(header + 24, &vocab, 4);
  write_file_atomic(path, [&](const std::function<void(const void*, size_t)>& put) {
    put(header, kHeader);
    std::vector<char> buf;
    const size_t block = 1 << 16;
    for (size_t i = 0; i < ids.size(); i += block) {
      const size_t m = std::min(block, ids.size() - i);
      buf.resize(m * bpt);
      for (size_t j = 0; j < m; ++j) {
        const uint32_t v = uint32_t(ids[i + j]);
        if (bpt == 2) {
          const uint16_t s = uint16_t(v);
          std::memcpy(buf.data() + 2 * j, &s, 2);
        } else {
          std::memcpy(buf.data() + 4 * j, &v, 4);
        }
      }
      put(buf.data(), buf.size());
    }
  });
}

void sample_batch(const TokenFile& f, uint64_t seed, int64_t step, int64_t micro, int64_t batch, int64_t seq,
                  int32_t* ids, int32_t* targets) {
  const int64_t span = f.size() - seq;  // start positions 0 .. size - seq - 1 leave room for the last target
  if (span < 1)
    bad(f.path().string() + ": " + std::to_string(f.size()) + " tokens are too few for seq_len " + std::to_string(seq));
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t h = hash_combine(hash_combine(hash_combine(seed, uint64_t(step)), uint64_t(micro)), uint64_t(b));
    const int64_t start = int64_t(h % uint64_t(span));
    for (int64_t t = 0; t < seq; ++t) {
      ids[b * seq + t] = f.at(start + t);
      targets[b * seq + t] = f.at(start + t + 1);
    }
  }
}

void eval_batch(const TokenFile& f, int64_t index, int64_t batch, int64_t seq, int32_t* ids, int32_t* targets) {
  const int64_t windows = (f.size() - 1) / seq;
  if (windows < 1)
    bad(f.path().string() + ": " + std::to_string(f.size()) + " tokens are too few for one validation window of " +
        std::to_string(seq + 1));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = ((index * batch + b) % windows) * seq;
    for (int64_t t = 0; t < seq; ++t) {
      ids[b * seq + t] = f.at(start + t);
      targets[b * seq + t] = f.at(start + t + 1);
    }
  }
}

PrepareResult prepare_data(const PrepareOptions& opts) {
  if (opts.inputs.empty()) bad("prepare-data: no input files");
  if (!(opts.val_fraction >= 0 && opts.val_fraction < 1))
    bad("--val-fraction must be in [0, 1), got " + std::to_string(opts.val_fraction));
  if (opts.output_dir.empty()) bad("prepare-data: no output directory (-o)");
  // Inputs first (a missing corpus fails before any work); a directory stands for its *.txt files.
  std::vector<fs::path> files;
  for (const auto& in : opts.inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> here;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file() && e.path().extension() == ".txt") here.push_back(e.path());
      std::sort(here.begin(), here.end());
      if (here.empty()) bad(in.string() + ": the directory holds no .txt files");
      files.insert(files.end(), here.begin(), here.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      bad(in.string() + ": no such corpus file or directory");
    }
  }
  Tokenizer tok = Tokenizer::from_dir(opts.tokenizer_dir);
  const std::optional<int32_t> bos = tok.bos_id();
  const std::vector<int32_t> eos = tok.eos_ids();
  PrepareResult r;
  r.vocab_size = tok.vocab_size();
  std::vector<int32_t> train, val;
  json sources = json::array();
  for (const auto& f : files) {
    if (opts.progress) opts.progress(r.documents, int64_t(files.size()), f);
    const std::string text = read_file(f, "corpus file");
    std::vector<int32_t> ids;
    if (opts.add_bos && bos) ids.push_back(*bos);
    const std::vector<int32_t> body = tok.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    if (!eos.empty()) ids.push_back(eos.front());
    // The tail of every document is validation data: every source is represented in both splits.
    const size_t nval = size_t(double(ids.size()) * opts.val_fraction);
    train.insert(train.end(), ids.begin(), ids.end() - ptrdiff_t(nval));
    val.insert(val.end(), ids.end() - ptrdiff_t(nval), ids.end());
    r.documents += 1;
    r.bytes += int64_t(text.size());
    sources.push_back({{"file", f.string()}, {"bytes", text.size()}, {"tokens", ids.size()}, {"val_tokens", nval}});
  }
  fs::create_directories(opts.output_dir);
  write_token_file(opts.output_dir / "train.bin", train, r.vocab_size);
  write_token_file(opts.output_dir / "val.bin", val, r.vocab_size);
  r.train_tokens = int64_t(train.size());
  r.val_tokens = int64_t(val.size());
  json meta = {{"format", "flashkit token files v1"},
               {"tokenizer", fs::absolute(opts.tokenizer_dir).string()},
               {"vocab_size", r.vocab_size},
               {"split", "the last val_fraction of every document (input file) is validation"},
               {"val_fraction", opts.val_fraction},
               {"bytes", r.bytes},
               {"train_tokens", r.train_tokens},
               {"val_tokens", r.val_tokens},
               {"sources", sources}};
  write_file_atomic(opts.output_dir / "meta.json", meta.dump(2) + "\n");
  return r;
}

PrepareResult prepare_synthetic(const SyntheticOptions& o) {
  if (o.task != "copy" && o.task != "mqar") bad("--synthetic: unknown task \"" + o.task + "\" (expected copy or mqar)");
  if (o.vocab_size < 16 || o.vocab_size > 65536) bad("--vocab-size: synthetic tasks need 16..65536 ids");
  if (o.seq_len < 8) bad("--seq-len: synthetic examples need at least 8 tokens");
  if (o.examples < 1 || o.val_examples < 0) bad("--examples must be >= 1 and --val-examples >= 0");
  if (o.output_dir.empty()) bad("prepare-data: no output directory (-o)");
  if (o.task == "mqar") {  // distinct keys come from half the content ids: more pairs than keys would never finish
    const int64_t pairs = (o.seq_len - 3) / 4, keys = (o.vocab_size - 3) / 2;
    if (pairs > keys)
      bad("--seq-len: " + std::to_string(o.seq_len) + " tokens hold " + std::to_string(pairs) +
          " mqar pairs, more than the " + std::to_string(keys) + " distinct keys of --vocab-size " +
          std::to_string(o.vocab_size) + " (at most --seq-len " + std::to_string(4 * keys + 6) + ")");
  }
  // Special ids at the top of the vocabulary: BOS, SEP, EOS.
  const int32_t BOS = int32_t(o.vocab_size - 3), SEP = int32_t(o.vocab_size - 2), EOS = int32_t(o.vocab_size - 1);
  const int64_t content = o.vocab_size - 3;
  auto example = [&](Rng& rng, std::vector<int32_t>& out) {
    out.push_back(BOS);
    if (o.task == "copy") {
      const int64_t n = (o.seq_len - 3) / 2;
      std::vector<int32_t> x(static_cast<size_t>(n));
      for (auto& v : x) v = int32_t(rng.below(uint64_t(content)));
      out.insert(out.end(), x.begin(), x.end());
      out.push_back(SEP);
      out.insert(out.end(), x.begin(), x.end());
    } else {
      // keys from the lower half of the content ids, values from the upper half; n pairs and n queries
      const int64_t n = (o.seq_len - 3) / 4;
      const int64_t half = content / 2;
      std::vector<int32_t> keys, vals;
      while (int64_t(keys.size()) < n) {  // distinct keys
        const int32_t k = int32_t(rng.below(uint64_t(half)));
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      }
      for (int64_t i = 0; i < n; ++i) vals.push_back(int32_t(half + int64_t(rng.below(uint64_t(content - half)))));
      for (int64_t i = 0; i < n; ++i) out.push_back(keys[size_t(i)]), out.push_back(vals[size_t(i)]);
      out.push_back(SEP);
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
      for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.below(uint64_t(i + 1)))]);
      for (int64_t i : order) out.push_back(keys[size_t(i)]), out.push_back(vals[size_t(i)]);
    }
    out.push_back(EOS);
  };
  std::vector<int32_t> train, val;
  Rng rng(o.seed, 0x5e7);
  for (int64_t i = 0; i < o.examples; ++i) example(rng, train);
  for (int64_t i = 0; i < o.val_examples; ++i) example(rng, val);
  fs::create_directories(o.output_dir);
  write_token_file(o.output_dir / "train.bin", train, o.vocab_size);
  write_token_file(o.output_dir / "val.bin", val, o.vocab_size);
  json meta = {{"format", "flashkit token files v1"},
               {"synthetic", o.task},
               {"vocab_size", o.vocab_size},
               {"bos_id", BOS},
               {"sep_id", SEP},
               {"eos_id", EOS},
               {"seq_len", o.seq_len},
               {"examples", o.examples},
               {"val_examples", o.val_examples},
               {"seed", o.seed},
               {"train_tokens", train.size()},
               {"val_tokens", val.size()}};
  write_file_atomic(o.output_dir / "meta.json", meta.dump(2) + "\n");
  PrepareResult r;
  r.documents = o.examples + o.val_examples;
  r.train_tokens = int64_t(train.size());
  r.val_tokens = int64_t(val.size());
  r.vocab_size = o.vocab_size;
  return r;
}

}  // namespace flashkit::train
