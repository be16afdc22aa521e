#include "model_cost.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/json_io.hpp"
#include "engine/config.hpp"
#include "flashkit/error.hpp"

namespace flashkit::analysis {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t ModelConfig::global_layers() const {
  return int64_t(std::count(layer_is_global.begin(), layer_is_global.end(), true));
}

namespace {
[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

// The engine's validated config, in the cost model's terms.
ModelConfig from_engine(const engine::ModelConfig& e, const std::string& name) {
  // The cost model is built from attention + MLP layers; a Mamba config has neither (its costs: docs/ssm.md).
  if (e.arch == engine::Arch::mamba)
    fail(Status::unsupported, name + ": model_type mamba: the cost model covers attention decoders only");
  ModelConfig c;
  c.name = name;
  c.model_type = engine::arch_name(e.arch);  // "gemma3_text" also for a multimodal "gemma3" config
  c.activation = e.activation == "gelu_tanh" ? "gelu_pytorch_tanh" : e.activation;
  c.hidden = e.hidden_size;
  c.intermediate = e.intermediate_size;
  c.layers = e.num_layers;
  c.heads = e.num_heads;
  c.kv_heads = e.num_kv_heads;
  c.head_dim = e.head_dim;
  c.vocab = e.vocab_size;
  c.sliding_window = e.sliding_window;  // 0 when no layer slides
  c.layer_is_global.resize(e.layer_sliding.size());
  for (size_t i = 0; i < e.layer_sliding.size(); ++i) c.layer_is_global[i] = !e.layer_sliding[i];
  c.tied_embeddings = e.tie_embeddings;
  c.qk_norm = e.qk_norm;
  c.sandwich_norm = e.sandwich_norms;
  c.gated_mlp = true;  // every architecture the engine runs
  return c;
}
}  // namespace

// One validator for every command: `cost` accepts exactly the configs `generate` accepts (engine/config.hpp).
ModelConfig parse_model_config(const json& root, const std::string& name) {
  try {
    return from_engine(engine::parse_config(root, name), name);
  } catch (const json::exception& e) {
    bad(name + ": unexpected field type: " + e.what());
  }
}

ModelConfig load_model_config(const std::string& path) {
  if (path.empty()) bad("no model given: pass -m DIR (containing config.json) or -m FILE.json");
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "config.json";
  if (!fs::exists(p, ec)) bad("model config not found: " + p.string());
  const json j = json_io::read_json_file(p);  // size and nesting bounded before anything walks the tree
  std::string name = fs::is_directory(fs::path(path), ec) ? fs::path(path).filename().string() : p.stem().string();
  if (name.empty() || name == "config") name = p.parent_path().filename().string();
  try {
    return from_engine(engine::parse_config(j, p.string()), name);
  } catch (const json::exception& e) {
    bad(p.string() + ": unexpected field type: " + e.what());
  }
}

ParamCount count_params(const ModelConfig& c) {
  ParamCount p;
  const double h = double(c.hidden), I = double(c.intermediate), q = double(c.heads * c.head_dim),
               kv = double(c.kv_heads * c.head_dim);
  p.embedding = double(c.vocab) * h;
  const double attn = h * q + 2 * h * kv + q * h;
  const double mlp = (c.gated_mlp ? 3 : 2) * h * I;
  const double norms = h * (c.sandwich_norm ? 4 : 2) + (c.qk_norm ? 2.0 * double(c.head_dim) : 0);
  p.per_layer = attn + mlp + norms;
  p.final_norm = h;
  p.lm_head = c.tied_embeddings ? 0 : double(c.vocab) * h;
  p.total = p.embedding + double(c.layers) * p.per_layer + p.final_norm + p.lm_head;
  return p;
}

namespace {
// Query-key pairs one head computes for one sequence.
double attention_pairs(const ModelConfig& c, const Workload& w, bool global) {
  const double W = (global || c.sliding_window <= 0) ? 1e300 : double(c.sliding_window);
  if (w.decode) return std::min(double(w.context), W);
  const double L = double(w.prefill);
  if (L <= W) return L * (L + 1) / 2;
  return W * (W + 1) / 2 + (L - W) * W;
}
double act_flops_per_elem(const std::string& a) {
  // tanh-GELU: x^3, 2 mul-adds, tanh (~ 5), 0.5 x (1 + t): about 10; SiLU: exp, add, div, mul: about 5.
  return a.find("gelu") != std::string::npos ? 10 : 5;
}
}  // namespace

std::vector<OpRow> layer_ops(const ModelConfig& c, const Workload& w, bool global) {
  const double T = double(w.tokens()), h = double(c.hidden), I = double(c.intermediate), hd = double(c.head_dim),
               nh = double(c.heads), nkv = double(c.kv_heads), e = w.act_bytes, we = w.weight_bytes, ke = w.kv_bytes;
  const double q = nh * hd, kv = nkv * hd;
  std::vector<OpRow> r;
  auto norm = [&](const char* name, double width, double wcount) {
    OpRow o{name};
    o.flops = 4 * T * width;  // square, sum, scale, weight
    o.weight_bytes = wcount * we;
    o.act_bytes = 2 * T * width * e;
    r.push_back(o);
  };
  auto proj = [&](const char* name, double in, double out, bool to_cache) {
    OpRow o{name};
    o.matmul = true;
    o.macs = T * in * out;
    o.flops = 2 * o.macs;
    o.weight_bytes = in * out * we;
    o.act_bytes = T * in * e + (to_cache ? 0 : T * out * e);
    o.kv_bytes = to_cache ? T * out * ke : 0;
    r.push_back(o);
  };
  auto residual = [&](const char* name) {
    OpRow o{name};
    o.flops = T * h;
    o.act_bytes = 3 * T * h * e;
    r.push_back(o);
  };
  norm("input_norm", h, h);
  proj("q_proj", h, q, false);
  proj("k_proj", h, kv, false);
  proj("v_proj", h, kv, true);  // V goes straight into the KV cache
  if (c.qk_norm) {
    norm("q_norm", q, hd);
    norm("k_norm", kv, hd);
  }
  {
    OpRow o{"rope"};
    o.flops = 3 * T * (q + kv);
    o.act_bytes = T * (2 * q + kv) * e;  // read q, k; write q
    o.kv_bytes = T * kv * ke;            // rotated k written to the cache
    r.push_back(o);
  }
  const double pairs = double(w.batch) * attention_pairs(c, w, global);
  // Keys (and values) each sequence streams from the cache: a fused (flash) kernel reads each once.
  const double keys = double(w.batch) * (w.decode ? std::min<double>(double(w.context), (global || c.sliding_window <= 0)
                                                                                            ? 1e300 : double(c.sliding_window))
                                                  : double(w.prefill));
  {
    OpRow o{global || c.sliding_window <= 0 ? "attn_scores" : "attn_scores(sliding)"};
    o.matmul = true;
    o.macs = nh * hd * pairs;
    o.flops = 2 * o.macs + 5 * nh * pairs;  // + scale, mask, running max, exp, sum
    o.act_bytes = T * q * e;                // Q
    o.kv_bytes = keys * kv * ke;            // K
    r.push_back(o);
  }
  {
    OpRow o{"attn_weighted_sum"};
    o.matmul = true;
    o.macs = nh * hd * pairs;
    o.flops = 2 * o.macs + T * q;  // + final 1/l scaling
    o.act_bytes = T * q * e;       // O written
    o.kv_bytes = keys * kv * ke;   // V
    r.push_back(o);
  }
  proj("o_proj", q, h, false);
  if (c.sandwich_norm) norm("post_attn_norm", h, h);
  residual("residual_attn");
  norm("pre_mlp_norm", h, h);
  if (c.gated_mlp) proj("mlp_gate", h, I, false);
  proj("mlp_up", h, I, false);
  {
    OpRow o{"mlp_act"};
    o.flops = T * I * (act_flops_per_elem(c.activation) + (c.gated_mlp ? 1 : 0));
    o.act_bytes = T * I * e * (c.gated_mlp ? 3 : 2);
    r.push_back(o);
  }
  proj("mlp_down", I, h, false);
  if (c.sandwich_norm) norm("post_mlp_norm", h, h);
  residual("residual_mlp");
  return r;
}

std::vector<OpRow> head_ops(const ModelConfig& c, const Workload& w) {
  const double T = double(w.tokens()), h = double(c.hidden), V = double(c.vocab), e = w.act_bytes;
  const double tl = double(w.batch);  // logits: last token of each sequence (prefill) or each decode token
  std::vector<OpRow> r;
  OpRow emb{"embedding"};
  emb.weight_bytes = T * h * w.weight_bytes;  // rows gathered
  emb.act_bytes = T * h * e;
  emb.flops = T * h;  // Gemma scales by sqrt(hidden); counted for everyone (negligible)
  r.push_back(emb);
  OpRow fn{"final_norm"};
  fn.flops = 4 * tl * h;
  fn.weight_bytes = h * w.weight_bytes;
  fn.act_bytes = 2 * tl * h * e;
  r.push_back(fn);
  OpRow lm{"lm_head"};
  lm.matmul = true;
  lm.macs = tl * h * V;
  lm.flops = 2 * lm.macs;
  lm.weight_bytes = V * h * w.weight_bytes;
  lm.act_bytes = tl * h * e + tl * V * 4;  // f32 logits
  r.push_back(lm);
  return r;
}

void evaluate(std::vector<OpRow>& rows, const DeviceSpec& dev, const std::string& compute_dtype) {
  const Roof mm = roof_of(dev, compute_dtype), vec = roof_of(dev, "f32");
  for (auto& o : rows) {
    const Roof& rf = o.matmul ? mm : vec;
    o.bound = bound_name(rf.bound(o.intensity()));
    o.floor_s = rf.floor_max(o.flops, o.bytes());
  }
}

double KvCache::at_context(int64_t ctx) const {
  const double sl = window > 0 ? double(std::min<int64_t>(ctx, window)) : double(ctx);
  return per_token_global * double(ctx) + per_token_sliding * sl;
}

KvCache kv_cache(const ModelConfig& c, double ke) {
  KvCache k;
  const double per_layer = 2.0 * double(c.kv_heads * c.head_dim) * ke;
  k.per_token_global = per_layer * double(c.global_layers());
  k.per_token_sliding = per_layer * double(c.sliding_layers());
  k.per_token = k.per_token_global + k.per_token_sliding;
  k.window = c.sliding_window;
  return k;
}

ModelTotals model_totals(const ModelConfig& c, const Workload& w, const DeviceSpec& dev) {
  ModelTotals t;
  auto add = [&](std::vector<OpRow> rows, double times) {
    evaluate(rows, dev, w.compute_dtype);
    for (const auto& o : rows) {
      t.macs += times * o.macs;
      t.flops += times * o.flops;
      t.weight_bytes += times * o.weight_bytes;
      t.act_bytes += times * o.act_bytes;
      t.kv_bytes += times * o.kv_bytes;
      t.floor_sum_of_ops += times * o.floor_s;
    }
  };
  if (c.global_layers() > 0) add(layer_ops(c, w, true), double(c.global_layers()));
  if (c.sliding_layers() > 0) add(layer_ops(c, w, false), double(c.sliding_layers()));
  add(head_ops(c, w), 1);
  t.bytes = t.weight_bytes + t.act_bytes + t.kv_bytes;
  t.intensity = t.flops / t.bytes;
  const Roof r = roof_of(dev, w.compute_dtype);
  t.floor_whole = r.floor_max(t.flops, t.bytes);
  t.bound = bound_name(r.bound(t.intensity));
  return t;
}

DataParallelComm dp_comm(const ModelConfig& c, const DeviceSpec& dev, int dp) {
  DataParallelComm d;
  d.dp = dp;
  d.grad_bytes = d.param_bytes = 4 * count_params(c).total;  // f32 gradients and master weights
  d.link_gbs = dev.link_gbs;
  if (dp > 1 && dev.link_gbs > 0) {
    const double link = dev.link_gbs * 1e9;
    d.allreduce_s = 2.0 * (dp - 1) / dp * d.grad_bytes / link;
    d.allgather_s = double(dp - 1) / dp * d.param_bytes / link;
  }
  return d;
}

MemoryPlan memory_plan(const ModelConfig& c, const Workload& w, const DeviceSpec& dev, int dp) {
  if (dp < 1) bad("--dp must be >= 1");
  MemoryPlan m;
  const ParamCount p = count_params(c);
  const KvCache k = kv_cache(c, w.kv_bytes);
  const int64_t ctx = w.decode ? w.context : w.prefill;
  m.weights = p.total * w.weight_bytes;
  m.kv_cache = double(w.batch) * k.at_context(ctx);
  const double T = double(w.tokens());
  const double width = 2.0 * double(c.hidden) + 2.0 * double(c.intermediate) +
                       double((c.heads + 2 * c.kv_heads) * c.head_dim);
  m.activations = T * width * w.act_bytes + double(w.batch) * double(c.vocab) * 4;
  m.total = m.weights + m.kv_cache + m.activations;
  m.usable = 0.9 * dev.mem_gb * 1e9;
  m.fits = m.total <= m.usable;
  m.tp_degree = 0;
  for (int t = 1; t <= 1024; t *= 2)
    if ((m.weights + m.kv_cache) / t + m.activations <= m.usable) {
      m.tp_degree = t;
      break;
    }
  m.dp = dp;
  const double psi = p.total;
  m.train_ddp = 16 * psi;
  m.train_zero1 = 4 * psi + 12 * psi / dp;
  m.train_zero2 = 2 * psi + 14 * psi / dp;
  m.train_zero3 = 16 * psi / dp;
  return m;
}

namespace {
json row_json(const OpRow& o) {
  return json{{"name", o.name},           {"macs", o.macs},
              {"flops", o.flops},         {"bytes", o.bytes()},
              {"weight_bytes", o.weight_bytes}, {"act_bytes", o.act_bytes},
              {"kv_bytes", o.kv_bytes},   {"intensity", o.intensity()},
              {"bound", o.bound},         {"floor_s", o.floor_s},
              {"roof", o.matmul ? "matrix" : "vector_f32"}};
}
json workload_json(const Workload& w) {
  return json{{"phase", w.decode ? "decode" : "prefill"}, {"batch", w.batch},
              {"prefill", w.prefill},                      {"context", w.context},
              {"tokens", w.tokens()},                      {"compute_dtype", w.compute_dtype},
              {"weight_elem_bytes", w.weight_bytes},       {"kv_elem_bytes", w.kv_bytes}};
}
}  // namespace

json cost_report(const ModelConfig& c, const Workload& w, const DeviceSpec& dev, int dp, const std::string& kind_in) {
  std::string kind = kind_in;
  if (kind.empty()) kind = c.global_layers() > 0 ? "global" : "sliding";
  if (kind != "global" && kind != "sliding") bad("--layer-kind must be 'global' or 'sliding'");
  if (kind == "global" && c.global_layers() == 0) bad(c.name + " has no global-attention layers");
  if (kind == "sliding" && c.sliding_layers() == 0) bad(c.name + " has no sliding-window layers");
  const ParamCount p = count_params(c);
  const KvCache k = kv_cache(c, w.kv_bytes);
  auto rows = layer_ops(c, w, kind == "global");
  evaluate(rows, dev, w.compute_dtype);
  OpRow lt{"layer_total"};
  for (const auto& o : rows) {
    lt.macs += o.macs, lt.flops += o.flops, lt.weight_bytes += o.weight_bytes, lt.act_bytes += o.act_bytes,
        lt.kv_bytes += o.kv_bytes, lt.floor_s += o.floor_s;
  }
  auto head = head_ops(c, w);
  evaluate(head, dev, w.compute_dtype);
  const ModelTotals t = model_totals(c, w, dev);
  const MemoryPlan m = memory_plan(c, w, dev, dp);
  const DataParallelComm dpc = dp_comm(c, dev, dp);
  std::string used;
  const double peak = peak_tflops(dev, w.compute_dtype, &used);
  const Roof r = roof_of(dev, w.compute_dtype);
  json ops = json::array();
  for (const auto& o : rows) ops.push_back(row_json(o));
  json hops = json::array();
  for (const auto& o : head) hops.push_back(row_json(o));
  json lt_j = row_json(lt);
  lt_j["bound"] = bound_name(r.bound(lt.intensity()));
  const double tokens = double(w.tokens());
  return json{
      {"model", c.name},
      {"model_type", c.model_type},
      {"config", {{"hidden", c.hidden}, {"intermediate", c.intermediate}, {"layers", c.layers}, {"heads", c.heads},
                  {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}, {"vocab", c.vocab},
                  {"sliding_window", c.sliding_window}, {"global_layers", c.global_layers()},
                  {"sliding_layers", c.sliding_layers()}, {"tied_embeddings", c.tied_embeddings},
                  {"qk_norm", c.qk_norm}, {"sandwich_norm", c.sandwich_norm}, {"activation", c.activation}}},
      {"device", {{"name", dev.name}, {"full_name", dev.full_name}, {"peak_tflops", peak}, {"peak_dtype", used},
                  {"f32_tflops", dev.fp32_tflops}, {"mem_bw_gbs", dev.mem_bw_gbs}, {"mem_gb", dev.mem_gb},
                  {"ridge_flop_per_byte", r.ridge()}, {"source", dev.source}}},
      {"workload", workload_json(w)},
      {"params_total", p.total},
      {"params_per_layer", p.per_layer},
      {"params_embedding", p.embedding},
      {"params_lm_head_untied", p.lm_head},
      {"kv_cache_bytes_per_token", k.per_token},
      {"kv_cache_bytes_per_token_global", k.per_token_global},
      {"kv_cache_bytes_per_token_sliding", k.per_token_sliding},
      {"kv_cache_window", k.window},
      {"layer_kind", kind},
      {"ops", ops},
      {"layer_total", lt_j},
      {"head_ops", hops},
      {"totals", {{"macs", t.macs}, {"flops", t.flops}, {"bytes", t.bytes}, {"weight_bytes", t.weight_bytes},
                  {"act_bytes", t.act_bytes}, {"kv_bytes", t.kv_bytes}, {"intensity", t.intensity},
                  {"bound", t.bound}, {"floor_s", t.floor_sum_of_ops}, {"floor_whole_s", t.floor_whole},
                  {"tokens_per_s_at_floor", tokens / t.floor_sum_of_ops}}},
      {"memory", {{"weights_bytes", m.weights}, {"kv_cache_bytes", m.kv_cache}, {"activation_bytes", m.activations},
                  {"total_bytes", m.total}, {"usable_bytes", m.usable}, {"fits", m.fits},
                  {"tensor_parallel_degree", m.tp_degree}, {"dp", m.dp},
                  {"train_bytes_per_gpu", {{"ddp", m.train_ddp}, {"zero1", m.train_zero1}, {"zero2", m.train_zero2},
                                           {"zero3", m.train_zero3}}},
                  {"train_note", "mixed-precision Adam: (2+2+12) Psi bytes unsharded; ZeRO-1 shards the 12 Psi "
                                 "optimizer states, ZeRO-2 also the 2 Psi gradients, ZeRO-3 also the 2 Psi "
                                 "parameters, over dp GPUs; activations excluded"}}},
      {"data_parallel", {{"dp", dpc.dp}, {"grad_bytes", dpc.grad_bytes}, {"param_bytes", dpc.param_bytes},
                         {"link_gbs", dpc.link_gbs}, {"allreduce_s", dpc.allreduce_s},
                         {"allgather_s", dpc.allgather_s}, {"step_comm_s", dpc.total_s()},
                         {"note", "flashkit train --dp: f32 gradients all-reduced, f32 parameters all-gathered "
                                  "(ZeRO-1), ring floor on the NVLink figure; latency excluded"}}},
  };
}

json cost_sweep(const ModelConfig& c, const Workload& base, const DeviceSpec& dev, const std::string& kind,
                int64_t lo, int64_t hi) {
  if (kind != "decode" && kind != "prefill") bad("--sweep must be 'decode' or 'prefill'");
  if (lo < 1 || hi < lo) bad("sweep range must satisfy 1 <= lo <= hi");
  const Roof r = roof_of(dev, base.compute_dtype);
  auto at = [&](int64_t x) {
    Workload w = base;
    w.decode = kind == "decode";
    if (w.decode) w.batch = x;
    else w.prefill = x;
    return std::pair<Workload, ModelTotals>(w, model_totals(c, w, dev));
  };
  // The matrix products alone (projections, attention, LM head): the classic "is it compute-bound" question,
  // without the elementwise ops whose traffic a fused implementation would remove.
  auto matmul_intensity = [&](int64_t x, bool with_attention = true) {
    Workload w = base;
    w.decode = kind == "decode";
    if (w.decode) w.batch = x;
    else w.prefill = x;
    double f = 0, b = 0;
    auto acc = [&](const std::vector<OpRow>& rows, double times) {
      for (const auto& o : rows)
        if (o.matmul && (with_attention || o.name.rfind("attn_", 0) != 0)) f += times * o.flops, b += times * o.bytes();
    };
    if (c.global_layers() > 0) acc(layer_ops(c, w, true), double(c.global_layers()));
    if (c.sliding_layers() > 0) acc(layer_ops(c, w, false), double(c.sliding_layers()));
    acc(head_ops(c, w), 1);
    return std::pair<double, double>(f, b);
  };
  json pts = json::array();
  for (int64_t x = lo; x <= hi; x *= 2) {
    auto [w, t] = at(x);
    pts.push_back({{"x", x}, {"tokens", w.tokens()}, {"flops", t.flops}, {"bytes", t.bytes},
                   {"weight_bytes", t.weight_bytes}, {"kv_bytes", t.kv_bytes}, {"act_bytes", t.act_bytes},
                   {"intensity", t.intensity}, {"bound", t.bound}, {"floor_s", t.floor_sum_of_ops},
                   {"floor_whole_s", t.floor_whole}, {"tokens_per_s", double(w.tokens()) / t.floor_sum_of_ops},
                   {"attainable_tflops", r.attainable(t.intensity) / 1e12},
                   {"matmul_intensity", matmul_intensity(x).first / matmul_intensity(x).second},
                   {"matmul_bound", bound_name(r.bound(matmul_intensity(x).first / matmul_intensity(x).second))},
                   {"weight_gemm_intensity", matmul_intensity(x, false).first / matmul_intensity(x, false).second}});
  }
  int64_t cross_mm = -1, cross_w = -1;
  for (int64_t x = 1; x <= (int64_t(1) << 20) && (cross_mm < 0 || cross_w < 0); x = x < 64 ? x + 1 : x + x / 32) {
    auto [f, b] = matmul_intensity(x);
    if (cross_mm < 0 && f / b >= r.ridge()) cross_mm = x;
    auto [fw, bw] = matmul_intensity(x, false);
    if (cross_w < 0 && fw / bw >= r.ridge()) cross_w = x;
  }
  // Crossover: smallest x (searched 1..1<<20) whose whole-step intensity reaches the ridge.
  int64_t cross = -1;
  for (int64_t x = 1; x <= (int64_t(1) << 20); x = x < 64 ? x + 1 : x + x / 32) {
    if (at(x).second.intensity >= r.ridge()) {
      cross = x;
      break;
    }
  }
  return json{{"model", c.name}, {"device", dev.name}, {"sweep", kind}, {"x_name", kind == "decode" ? "batch" : "prefill_length"},
              {"context", base.context}, {"ridge", r.ridge()}, {"peak_tflops", r.peak_flops / 1e12},
              {"bw_gbs", r.bw_bytes / 1e9}, {"crossover", cross}, {"crossover_matmul", cross_mm}, {"crossover_weight_gemms", cross_w},
              {"note", "crossover: smallest x whose whole-step intensity (all ops, unfused elementwise traffic included) "
                       "reaches the ridge (-1: none up to 2^20); crossover_matmul: the same for the matrix products only; "
                       "crossover_weight_gemms: projections and LM head only (attention excluded)"},
              {"points", pts}};
}

}  // namespace flashkit::analysis
