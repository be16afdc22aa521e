// Writes a random-weights GGUF of the Llama-3.2-1B shape (16 layers, hidden 2048, 32 heads / 8 KV heads of 64,
// intermediate 8192, vocab 128256, tied embeddings) whose matrices are all one type, for the decode benchmark of
// quantized weights on CUDA (tools/gpu/quantcuda.sh). Speed only: the quants are random bytes with small valid f16
// scales (so every value and every logit is finite); bf16 matrices are random values of about 0.02. Uses the GGUF
// test builder (tests/model/gguf_builder.hpp).
//   flashkit_quant_gguf_writer TYPE OUT.gguf [LAYERS]     TYPE: bf16 q8_0 q4_0 q4_k q5_k q6_k
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "flashkit/dtype.hpp"
#include "gguf_builder.hpp"

namespace {

struct Type {
  const char* name;
  uint32_t ggml;
  int values, bytes;  // per block (bf16: 1 value, 2 bytes)
};
constexpr Type kTypes[] = {{"bf16", 30, 1, 2},    {"q8_0", 8, 32, 34},   {"q4_0", 2, 32, 18},
                           {"q4_k", 12, 256, 144}, {"q5_k", 13, 256, 176}, {"q6_k", 14, 256, 210}};

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next_u64() {  // splitmix64: fast, and good enough for benchmark noise
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A small random f16 scale in [0.5, 1) * mag.
uint16_t small_half(float mag) {
  return flashkit::f32_to_f16(mag * (0.5f + 0.5f * float(next_u64() >> 40) / float(1u << 24)));
}

std::string matrix(const Type& t, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  std::string s(size_t(n / t.values * t.bytes), '\0');
  for (size_t i = 0; i + 8 <= s.size(); i += 8) {
    const uint64_t r = next_u64();
    std::memcpy(&s[i], &r, 8);
  }
  auto put = [&](size_t at, uint16_t h) { std::memcpy(&s[at], &h, 2); };
  const std::string name = t.name;
  if (name == "bf16") {
    for (int64_t i = 0; i < n; ++i) {  // uniform in about [-0.035, 0.035]
      const float v = 0.07f * (float(next_u64() >> 40) / float(1u << 24) - 0.5f);
      put(size_t(i) * 2, flashkit::f32_to_bf16(v));
    }
    return s;
  }
  for (int64_t b = 0; b < n / t.values; ++b) {
    const size_t o = size_t(b) * size_t(t.bytes);
    if (name == "q6_k") {
      put(o + 208, small_half(2e-5f));
    } else if (name == "q4_k" || name == "q5_k") {
      put(o, small_half(5e-5f));
      put(o + 2, small_half(5e-5f));
    } else {
      put(o, small_half(name == "q8_0" ? 2e-4f : 4e-3f));
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: flashkit_quant_gguf_writer TYPE OUT.gguf [LAYERS]  (TYPE: bf16 q8_0 q4_0 q4_k q5_k q6_k)\n");
    return 2;
  }
  const Type* t = nullptr;
  for (const Type& k : kTypes)
    if (std::string(argv[1]) == k.name) t = &k;
  if (!t) {
    std::fprintf(stderr, "flashkit_quant_gguf_writer: unknown type %s\n", argv[1]);
    return 2;
  }
  const int64_t layers = argc > 3 ? std::atoll(argv[3]) : 16;
  const int64_t H = 2048, F = 8192, heads = 32, kvh = 8, hd = 64, V = 128256;
  fk_test::GgufBuilder b;
  b.str("general.architecture", "llama").str("general.name", std::string("random-llama-3.2-1b-") + t->name);
  b.u32("llama.context_length", 8192).u32("llama.embedding_length", uint32_t(H));
  b.u32("llama.block_count", uint32_t(layers)).u32("llama.feed_forward_length", uint32_t(F));
  b.u32("llama.attention.head_count", uint32_t(heads)).u32("llama.attention.head_count_kv", uint32_t(kvh));
  b.f32("llama.rope.freq_base", 500000.0f).f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    b.tensor(name, {uint64_t(cols), uint64_t(rows)}, t->ggml, matrix(*t, rows, cols));
  };
  const std::vector<float> ones(size_t(H), 1.0f);
  mat("token_embd.weight", V, H);
  b.tensor("output_norm.weight", {uint64_t(H)}, 0, fk_test::f32_bytes(ones));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.tensor(p + "attn_norm.weight", {uint64_t(H)}, 0, fk_test::f32_bytes(ones));
    b.tensor(p + "ffn_norm.weight", {uint64_t(H)}, 0, fk_test::f32_bytes(ones));
    mat(p + "attn_q.weight", heads * hd, H);
    mat(p + "attn_k.weight", kvh * hd, H);
    mat(p + "attn_v.weight", kvh * hd, H);
    mat(p + "attn_output.weight", H, heads * hd);
    mat(p + "ffn_gate.weight", F, H);
    mat(p + "ffn_up.weight", F, H);
    mat(p + "ffn_down.weight", H, F);
  }
  const std::string bytes = b.build();
  std::ofstream f(argv[2], std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "flashkit_quant_gguf_writer: cannot write %s\n", argv[2]);
    return 1;
  }
  std::printf("wrote %s: %s, %lld layers, %.1f MB\n", argv[2], t->name, (long long)layers, double(bytes.size()) / 1e6);
  return 0;
}
