// Dumps what flashkit's engine computes for one prompt, through the C++ Session API (the C API / Python package
// expose only fresh-session last-row logits and generate(); this needs all prefill rows and decode-step logits).
// Used by bench/engine/hf_fidelity.py on the GPU machine; built there against $BUILD/lib/libflashkit.so:
//   g++ -std=c++20 -O2 -Iinclude bench/engine/fk_session_dump.cpp -L$BUILD/lib -lflashkit
//       -Wl,-rpath,$BUILD/lib -Wl,--allow-shlib-undefined -o fk_session_dump
//
//   fk_session_dump MODEL_DIR DEVICE DTYPE THREADS PROMPT_FILE FEED_FILE N_GREEDY OUT_DIR
// PROMPT_FILE / FEED_FILE: token ids, whitespace-separated (FEED_FILE may be empty). Writes to OUT_DIR:
//   prefill.f32   [n_prompt, vocab] little-endian f32: every prefill row (Session::prefill with all_logits)
//   decode.f32    [n_feed, vocab]: after prefill, Session::decode(feed[i]) then logits() (teacher forcing)
//   greedy.txt    N_GREEDY ids from flashkit::generate (temperature 0, eos ignored) in a fresh session
//   info.json     backend, weight dtype, sizes, seconds
// Exit status 0 on success, 2 on a flashkit::Error or bad arguments (message on stderr).
#include <flashkit/engine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<int32_t> ids;
  long long v;
  while (f >> v) ids.push_back(int32_t(v));
  if (!f.eof()) throw std::runtime_error("bad token id in " + path);
  return ids;
}

void write_f32(const std::string& path, const float* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  const size_t w = n ? std::fwrite(data, sizeof(float), n, f) : 0;
  if (std::fclose(f) != 0 || w != n) throw std::runtime_error("short write to " + path);
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

// ModelInfo fields that newer headers have (a template, so the requires-expressions compile against either).
template <class Info>
void newer_fields(std::ostream& js, const Info& info) {
  if constexpr (requires { info.activation_dtype; })
    js << "\", \"activation_dtype\": \"" << esc(info.activation_dtype);
  if constexpr (requires { info.kv_dtype; }) js << "\", \"kv_dtype\": \"" << esc(info.kv_dtype);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::cerr << "usage: fk_session_dump MODEL_DIR DEVICE DTYPE THREADS PROMPT_FILE FEED_FILE N_GREEDY OUT_DIR\n";
    return 2;
  }
  try {
    const std::string dir = argv[1], out = argv[8];
    flashkit::LoadOptions lo;
    lo.device = argv[2];
    lo.dtype = argv[3];
    lo.threads = std::atoi(argv[4]);
    const std::vector<int32_t> prompt = read_ids(argv[5]), feed = read_ids(argv[6]);
    const int n_greedy = std::atoi(argv[7]);
    if (prompt.empty()) throw std::runtime_error("empty prompt");
    lo.max_context = int64_t(prompt.size() + std::max<size_t>(feed.size(), size_t(n_greedy)) + 16);

    double t0 = now();
    auto model = flashkit::Model::load(dir, lo);
    const double t_load = now() - t0;
    const auto& info = model->info();
    const size_t vocab = size_t(info.vocab_size);

    // Prefill, all rows; then teacher-forced decode steps.
    t0 = now();
    auto s = model->new_session();
    s->prefill(std::span<const int32_t>(prompt.data(), prompt.size()), /*all_logits=*/true);
    const std::vector<float>& all = s->all_logits();
    if (all.size() != prompt.size() * vocab)
      throw std::runtime_error("all_logits has " + std::to_string(all.size()) + " floats, expected " +
                               std::to_string(prompt.size() * vocab));
    write_f32(out + "/prefill.f32", all.data(), all.size());
    const double t_prefill = now() - t0;
    t0 = now();
    std::vector<float> dec(feed.size() * vocab);
    for (size_t i = 0; i < feed.size(); ++i) {
      s->decode(feed[i]);
      const auto l = s->logits();
      if (l.size() != vocab) throw std::runtime_error("decode logits size mismatch");
      std::copy(l.begin(), l.end(), dec.begin() + i * vocab);
    }
    write_f32(out + "/decode.f32", dec.data(), dec.size());
    const double t_decode = now() - t0;
    s.reset();

    // Own greedy continuation: the engine's generate loop (its sampler, CUDA graphs), eos ignored.
    t0 = now();
    std::vector<int32_t> greedy;
    if (n_greedy > 0) {
      auto g = model->new_session();
      flashkit::GenerateOptions go;
      go.max_new_tokens = n_greedy;
      go.temperature = 0.0f;
      go.stop_at_eos = false;
      greedy = flashkit::generate(*g, std::span<const int32_t>(prompt.data(), prompt.size()), go).tokens;
    }
    const double t_greedy = now() - t0;
    {
      std::ofstream f(out + "/greedy.txt");
      for (size_t i = 0; i < greedy.size(); ++i) f << (i ? " " : "") << greedy[i];
      f << "\n";
      if (!f) throw std::runtime_error("cannot write greedy.txt");
    }
    std::ostringstream js;
    js << "{\"backend\": \"" << esc(info.backend) << "\", \"weight_dtype\": \"" << esc(info.weight_dtype);
    newer_fields(js, info);
    js << "\", \"architecture\": \"" << esc(info.architecture) << "\", \"vocab_size\": " << info.vocab_size
       << ", \"parameters\": " << info.parameters << ", \"n_prompt\": " << prompt.size()
       << ", \"n_feed\": " << feed.size() << ", \"n_greedy\": " << greedy.size() << ", \"load_s\": " << t_load
       << ", \"prefill_s\": " << t_prefill << ", \"decode_s\": " << t_decode << ", \"greedy_s\": " << t_greedy
       << "}\n";
    std::ofstream f(out + "/info.json");
    f << js.str();
    if (!f) throw std::runtime_error("cannot write info.json");
    std::cerr << "fk_session_dump: " << js.str();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fk_session_dump: " << e.what() << "\n";
    return 2;
  }
}
