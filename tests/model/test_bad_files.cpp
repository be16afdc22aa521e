// Hostile and broken checkpoints: every one must raise flashkit::Error whose message names the file and the fault,
// never crash, hang or allocate what the file merely claims.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_builder.hpp"
#include "model/gguf.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;
using namespace flashkit::model;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flashkit-bad-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path write(const std::string& name, const std::string& bytes) const {
    fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file with the given header JSON and `data_bytes` zero bytes of data.
std::string st_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Runs `f`, expecting flashkit::Error whose message contains every one of `needles`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const flashkit::Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a flashkit::Error: " << e.what();
  }
}

void expect_st_error(const std::string& bytes, std::initializer_list<std::string> needles) {
  TempDir d;
  auto p = d.write("model.safetensors", bytes);
  expect_error([&] { open_safetensors(p); }, needles);
  expect_error([&] { open_safetensors_memory(bytes.data(), bytes.size(), "model.safetensors"); }, needles);
}

const std::string kOk = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

TEST(BadSafetensors, ValidBaselineOpens) {
  TempDir d;
  auto p = d.write("model.safetensors", st_file(kOk, 24));
  auto s = open_safetensors(d.path());
  EXPECT_EQ(s->get("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s->get("a").nbytes, 24u);
}

TEST(BadSafetensors, MissingDirectoryAndFile) {
  expect_error([] { open_safetensors("/nonexistent/flashkit/ckpt"); }, {"/nonexistent/flashkit/ckpt", "no such"});
  TempDir d;
  expect_error([&] { open_safetensors(d.path()); }, {d.path().string(), "model.safetensors"});
}

TEST(BadSafetensors, TooShortForLength) {
  expect_st_error("abc", {"model.safetensors", "too short"});
  expect_st_error("", {"model.safetensors", "too short"});
}

TEST(BadSafetensors, HeaderLengthLargerThanFile) {
  expect_st_error(le64(1000) + "{}", {"model.safetensors", "header length 1000"});
  expect_st_error(le64(~0ull) + "{}", {"model.safetensors", "header length", "100 MB"});
}

TEST(BadSafetensors, TruncatedFile) {
  const std::string full = st_file(kOk, 24);
  expect_st_error(full.substr(0, full.size() - 1), {"model.safetensors", "'a'", "exceeds"});
}

TEST(BadSafetensors, InvalidJson) {
  expect_st_error(st_file("{\"a\": [1, 2", 0), {"model.safetensors", "invalid JSON"});
  expect_st_error(st_file("[1,2]", 0), {"model.safetensors", "expected a JSON object"});
  expect_st_error(st_file(std::string(5000, '[') + std::string(5000, ']'), 0), {"model.safetensors", "nested"});
}

TEST(BadSafetensors, UnknownOrUnsupportedDtype) {
  expect_st_error(st_file(R"({"x":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4),
                  {"model.safetensors", "unsupported dtype 'I8' for tensor 'x'", "F32, F16, BF16"});
  expect_st_error(st_file(R"({"x":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}})", 4), {"'Q9'", "'x'"});
  expect_st_error(st_file(R"({"x":{"dtype":7,"shape":[4],"data_offsets":[0,4]}})", 4), {"'x'", "dtype"});
}

TEST(BadSafetensors, HeaderLiesAboutSizes) {
  // shape says 6 floats (24 bytes) but the offsets span 20
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24),
                  {"model.safetensors", "'a'", "needs 24 bytes", "span 20"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", 24), {"'a'", "shape"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", 24),
                  {"'a'", "overflow"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 24), {"'a'", "end before"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2]}})", 24), {"'a'", "data_offsets"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 24), {"'a'", "shape"});
  expect_st_error(st_file(R"({"a":5})", 24), {"'a'", "expected an object"});
}

TEST(BadSafetensors, OffsetsOutOfRangeOrOverlapping) {
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})", 24),
                  {"model.safetensors", "'a'", "[100, 108)", "exceeds"});
  expect_st_error(
      st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}})", 24),
      {"'a'"});
  expect_st_error(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                          24),
                  {"model.safetensors", "overlap", "'a'", "'b'"});
}

TEST(BadSafetensors, MetadataIsIgnoredAndMisalignedDataIsRealigned) {
  // A 1-byte-odd header puts the data at an odd address; the reader must still hand out aligned f32.
  std::string h = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  std::string bytes = le64(h.size() + 1) + h + " ";
  float v[2] = {1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(v), 8);
  TempDir d;
  auto s = open_safetensors(d.write("x.safetensors", bytes));
  const auto& a = s->get("a");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4, 0u);
  EXPECT_EQ(static_cast<const float*>(a.data)[0], 1.5f);
  EXPECT_EQ(static_cast<const float*>(a.data)[1], -2.0f);
}

TEST(BadSafetensors, IndexProblems) {
  TempDir d;
  d.write("model-1.safetensors", st_file(kOk, 24));
  d.write("model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors","b":"model-2.safetensors"}})");
  expect_error([&] { open_safetensors(d.path()); },
               {"model.safetensors.index.json", "'b'", "model-2.safetensors", "does not exist"});
  d.write("model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors","c":"model-1.safetensors"}})");
  expect_error([&] { open_safetensors(d.path()); },
               {"model.safetensors.index.json", "'c'", "model-1.safetensors", "no such tensor"});
  d.write("model.safetensors.index.json", R"({"weight_map":{"a":"../../etc/passwd"}})");
  expect_error([&] { open_safetensors(d.path()); }, {"model.safetensors.index.json", "not a plain file name"});
  d.write("model.safetensors.index.json", R"({"metadata":{}})");
  expect_error([&] { open_safetensors(d.path()); }, {"model.safetensors.index.json", "weight_map"});
  d.write("model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors"})");
  expect_error([&] { open_safetensors(d.path()); }, {"model.safetensors.index.json", "invalid JSON"});
  d.write("model.safetensors.index.json", R"({"weight_map":{"a":"model-1.safetensors"}})");
  EXPECT_EQ(open_safetensors(d.path())->names(), std::vector<std::string>{"a"});
  // a broken shard is reported under the shard's own name
  d.write("model-1.safetensors", "short");
  expect_error([&] { open_safetensors(d.path()); }, {"model-1.safetensors", "too short"});
}

TEST(BadSafetensors, NotARegularFile) {
  TempDir d;
  fs::create_directory(d.path() / "model.safetensors");
  expect_error([&] { open_safetensors(d.path() / "model.safetensors" / "x"); }, {"no such"});
  const fs::path fifo = d.path() / "fifo.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { open_safetensors(fifo); }, {"fifo.safetensors", "not a regular file"});
}

// ---- GGUF ------------------------------------------------------------------------------------------------------

using fk_test::GgufBuilder;

void expect_gguf_error(const std::string& bytes, std::initializer_list<std::string> needles) {
  TempDir d;
  auto p = d.write("bad.gguf", bytes);
  expect_error([&] { open_gguf(p); }, needles);
  expect_error([&] { open_gguf_memory(bytes.data(), bytes.size(), "bad.gguf"); }, needles);
}

GgufBuilder one_tensor() {
  GgufBuilder b;
  b.llama().tensor("token_embd.weight", {4, 2}, 0, fk_test::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  return b;
}

std::string value(auto x) { return std::string(reinterpret_cast<const char*>(&x), sizeof x); }

TEST(BadGguf, ValidBaselineOpens) {
  const std::string bytes = one_tensor().build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "ok.gguf");
  EXPECT_EQ(g->get("model.embed_tokens.weight").shape, (std::vector<int64_t>{2, 4}));
}

TEST(BadGguf, MissingFile) {
  expect_error([] { open_gguf("/nonexistent/model.gguf"); }, {"/nonexistent/model.gguf", "no such file"});
}

TEST(BadGguf, BadMagicAndVersion) {
  std::string b = one_tensor().build();
  b[0] = 'X';
  expect_gguf_error(b, {"bad.gguf", "magic"});
  expect_gguf_error("GG", {"bad.gguf", "magic"});
  GgufBuilder v1 = one_tensor();
  v1.version = 1;
  expect_gguf_error(v1.build(), {"bad.gguf", "version 1", "2 and 3"});
  v1.version = 4;
  expect_gguf_error(v1.build(), {"bad.gguf", "version 4"});
}

TEST(BadGguf, TruncatedAnywhere) {
  const std::string full = one_tensor().build();
  // Cutting inside the header, the metadata, the tensor infos or the data must all fail cleanly.
  for (size_t n : {size_t(6), size_t(20), size_t(30), size_t(60), full.size() - 40, full.size() - 1}) {
    SCOPED_TRACE(n);
    expect_gguf_error(full.substr(0, n), {"bad.gguf"});
  }
  expect_gguf_error(full.substr(0, 30), {"bad.gguf", "metadata count 3 cannot fit"});
  expect_gguf_error(full.substr(0, 140), {"bad.gguf", "truncated", "at offset"});
  expect_gguf_error(full.substr(0, full.size() - 1), {"bad.gguf", "token_embd.weight", "exceeds"});
}

TEST(BadGguf, AbsurdCounts) {
  GgufBuilder b = one_tensor();
  b.n_tensors_override = uint64_t(1) << 60;
  expect_gguf_error(b.build(), {"bad.gguf", "tensor count 1152921504606846976"});
  b = one_tensor();
  b.n_kv_override = ~uint64_t(0);
  expect_gguf_error(b.build(), {"bad.gguf", "metadata count"});
  std::string arr;
  fk_test::put_u32(arr, 4);
  fk_test::put_u64(arr, uint64_t(1) << 60);
  b = one_tensor();
  b.raw("huge.array", 9, arr);
  expect_gguf_error(b.build(), {"bad.gguf", "huge.array", "1152921504606846976 array elements"});
  std::string s;
  fk_test::put_u64(s, uint64_t(1) << 62);
  b = one_tensor();
  b.raw("huge.string", 8, s);
  expect_gguf_error(b.build(), {"bad.gguf", "truncated", "string"});
  b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, "");
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "overflows"});
  b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {1, 1, 1, 1, 1}, 0, fk_test::f32_bytes({1}));
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "5 dimensions"});
}

TEST(BadGguf, BadMetadata) {
  GgufBuilder b = one_tensor();
  b.raw("weird", 13, "");
  expect_gguf_error(b.build(), {"bad.gguf", "weird", "value type 13"});
  b = one_tensor();
  std::string deep;
  for (int i = 0; i < 20; ++i) {
    fk_test::put_u32(deep, 9);
    fk_test::put_u64(deep, 1);
  }
  fk_test::put_u32(deep, 0);
  fk_test::put_u64(deep, 0);
  b.raw("deep", 9, deep);
  expect_gguf_error(b.build(), {"bad.gguf", "deep", "nests arrays deeper"});
  b = one_tensor();
  b.u32("llama.block_count", 1).u32("llama.block_count", 2);
  expect_gguf_error(b.build(), {"bad.gguf", "llama.block_count", "twice"});
  for (uint32_t a : {0u, 3u, 48u}) {
    b = one_tensor();
    b.u32("general.alignment", a);
    expect_gguf_error(b.build(), {"bad.gguf", "general.alignment", "power of two"});
  }
  GgufBuilder noarch;
  noarch.tensor("token_embd.weight", {2}, 0, fk_test::f32_bytes({1, 2}));
  expect_gguf_error(noarch.build(), {"bad.gguf", "general.architecture", "missing"});
  GgufBuilder other;
  other.str("general.architecture", "mamba");
  expect_gguf_error(other.build(), {"bad.gguf", "mamba", "not supported", "qwen2"});
}

TEST(BadGguf, TensorsLieAboutData) {
  GgufBuilder b = one_tensor();
  b.tensors[0].offset = 4096;
  expect_gguf_error(b.build(), {"bad.gguf", "token_embd.weight", "[4096, 4128)", "exceeds"});
  b = one_tensor();
  b.tensors[0].offset = 8;
  expect_gguf_error(b.build(), {"bad.gguf", "token_embd.weight", "offset 8", "alignment 32"});
  b = one_tensor();
  b.tensor("output.weight", {4, 2}, 0, fk_test::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}), 0);
  expect_gguf_error(b.build(), {"bad.gguf", "overlap", "token_embd.weight", "output.weight"});
  b = one_tensor();
  b.tensor("token_embd.weight", {2}, 0, fk_test::f32_bytes({1, 2}));
  expect_gguf_error(b.build(), {"bad.gguf", "token_embd.weight", "listed twice"});
  b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {16, 2}, 8, std::string(34, '\0'));  // Q8_0 rows of 16: not whole blocks
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "Q8_0", "32-element blocks"});
  b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {128, 2}, 12, std::string(144, '\0'));  // Q4_K rows of 128: not whole blocks
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "Q4_K", "256-element blocks"});
}

TEST(BadGguf, UnknownOrUnsupportedTensorType) {
  GgufBuilder b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {256}, 11, std::string(110, '\0'));
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "Q3_K", "F32, F16, BF16, Q8_0, Q4_0, Q4_K"});
  b = one_tensor();
  b.tensor("blk.0.ffn_up.weight", {4}, 200, std::string(4, '\0'));
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.ffn_up.weight", "type 200"});
  try {
    const std::string bytes = b.build();
    open_gguf_memory(bytes.data(), bytes.size(), "bad.gguf");
  } catch (const flashkit::Error& e) {
    EXPECT_EQ(e.status(), flashkit::Status::unsupported);
  }
}

TEST(BadGguf, PermutationNeedsConsistentHeads) {
  GgufBuilder b;
  b.llama(3, 3).tensor("blk.0.attn_q.weight", {1, 4}, 0, fk_test::f32_bytes({1, 2, 3, 4}));
  expect_gguf_error(b.build(), {"bad.gguf", "blk.0.attn_q.weight", "3 heads"});
  GgufBuilder nohead;
  nohead.str("general.architecture", "llama")
      .tensor("blk.0.attn_q.weight", {1, 4}, 0, fk_test::f32_bytes({1, 2, 3, 4}));
  expect_gguf_error(nohead.build(), {"bad.gguf", "llama.attention.head_count", "missing"});
}

TEST(BadGguf, ConfigFromIncompleteMetadata) {
  const std::string bytes = one_tensor().build();
  auto g = open_gguf_memory(bytes.data(), bytes.size(), "bad.gguf");
  expect_error([&] { gguf_hf_config(*g); }, {"bad.gguf", "llama.embedding_length", "missing"});
}

}  // namespace
