// The trainable decoder (see model.hpp): parameters in one arena, the engine's forward schedule, its backward, and
// the chunked lm_head + cross-entropy.
#include "train/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "flashkit/error.hpp"
#include "train/random.hpp"

namespace flashkit::train {

namespace {
[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }
}  // namespace

void check_trainable(const engine::ModelConfig& c, const std::string& where) {
  if (c.arch == engine::Arch::mamba) {
    if (c.ssm.proj_bias)
      bad(where + ": use_bias: training supports Mamba models without in_proj / out_proj biases (use_bias false)");
    return;
  }
  if (c.arch != engine::Arch::llama && c.arch != engine::Arch::gemma3)
    bad(where + ": model_type \"" + c.model_type + "\": training supports llama, gemma3_text and mamba");
  if (c.attention_bias || c.o_bias) bad(where + ": attention_bias: training supports models without biases");
  if (c.head_dim % 8 != 0 || c.head_dim > 256)
    bad(where + ": head_dim " + std::to_string(c.head_dim) +
        ": flashkit's attention needs a multiple of 8 in [8, 256] (set head_dim or hidden_size / num_attention_heads)");
}

TrainModel::TrainModel(const engine::ModelConfig& cfg, Backend& be, int64_t batch, int64_t seq)
    : cfg_(cfg), be_(be), B_(batch), T_(seq) {
  check_trainable(cfg, "model");
  if (batch <= 0 || seq <= 0) bad("batch and seq must be positive");
  H_ = cfg.hidden_size;
  F_ = cfg.intermediate_size;
  hd_ = cfg.head_dim;
  qd_ = cfg.num_heads * hd_;
  kvd_ = cfg.num_kv_heads * hd_;
  V_ = cfg.vocab_size;
  const int64_t L = cfg.num_layers;
  if (mamba()) {
    if (!be.supports_ssm())
      fail(Status::unsupported, "model_type mamba: the " + be.name() +
                                    " training backend has no selective-scan ops yet (train Mamba recipes with "
                                    "\"device\": \"cpu\")");
    setup_mamba();
    return;
  }

  // The table: decayed matrices first (q|k|v and gate|up adjacent), then embeddings and norms.
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    table_.add(pre + "self_attn.q_proj.weight", {qd_, H_}, true);
    table_.add(pre + "self_attn.k_proj.weight", {kvd_, H_}, true, false);
    table_.add(pre + "self_attn.v_proj.weight", {kvd_, H_}, true, false);
    table_.add(pre + "self_attn.o_proj.weight", {H_, qd_}, true);
    table_.add(pre + "mlp.gate_proj.weight", {F_, H_}, true);
    table_.add(pre + "mlp.up_proj.weight", {F_, H_}, true, false);
    table_.add(pre + "mlp.down_proj.weight", {H_, F_}, true);
  }
  if (!cfg.tie_embeddings) table_.add("lm_head.weight", {V_, H_}, true);
  table_.pad();
  table_.add("model.embed_tokens.weight", {V_, H_}, false);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    table_.add(pre + "input_layernorm.weight", {H_}, false);
    table_.add(pre + "post_attention_layernorm.weight", {H_}, false);
    if (cfg.sandwich_norms) {
      table_.add(pre + "pre_feedforward_layernorm.weight", {H_}, false);
      table_.add(pre + "post_feedforward_layernorm.weight", {H_}, false);
    }
    if (cfg.qk_norm) {
      table_.add(pre + "self_attn.q_norm.weight", {hd_}, false);
      table_.add(pre + "self_attn.k_norm.weight", {hd_}, false);
    }
  }
  table_.add("model.norm.weight", {H_}, false);
  table_.pad();
  alloc_params("model.embed_tokens.weight", "model.norm.weight");
  const DType P = be_.param_dtype();

  const int64_t qkv_cols = qd_ + 2 * kvd_;
  layers_.resize(size_t(L));
  Mat h_prev = act(H_);
  for (int64_t l = 0; l < L; ++l) {
    Layer& y = layers_[size_t(l)];
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    y.sliding = cfg.layer_sliding[size_t(l)];
    auto pg = [&](const std::string& n, Mat& pv, Mat& gv) {
      pv = p(pre + n);
      gv = g(pre + n);
    };
    pg("input_layernorm.weight", y.in_norm, y.g_in_norm);
    pg("post_attention_layernorm.weight", y.post_attn_norm, y.g_post_attn_norm);
    if (cfg.sandwich_norms) {
      pg("pre_feedforward_layernorm.weight", y.pre_ff_norm, y.g_pre_ff_norm);
      pg("post_feedforward_layernorm.weight", y.post_ff_norm, y.g_post_ff_norm);
    }
    if (cfg.qk_norm) {
      pg("self_attn.q_norm.weight", y.q_norm, y.g_q_norm);
      pg("self_attn.k_norm.weight", y.k_norm, y.g_k_norm);
    }
    const ParamEntry* q = table_.find(pre + "self_attn.q_proj.weight");
    const ParamEntry* gate = table_.find(pre + "mlp.gate_proj.weight");
    y.wqkv = params_.view(q->offset, qkv_cols, H_);
    y.g_wqkv = grads_.view(q->offset, qkv_cols, H_);
    y.wgu = params_.view(gate->offset, 2 * F_, H_);
    y.g_wgu = grads_.view(gate->offset, 2 * F_, H_);
    pg("self_attn.o_proj.weight", y.wo, y.g_wo);
    pg("mlp.down_proj.weight", y.wdown, y.g_wdown);

    y.h_in = h_prev;
    y.xn1 = act(H_);
    y.rstd1 = act(1, P, false);
    if (cfg.qk_norm) {
      y.qkv_raw = act(qkv_cols);
      y.rstd_q = act(cfg.num_heads, P, false);
      y.rstd_k = act(cfg.num_kv_heads, P, false);
    }
    y.qkv = act(qkv_cols);
    y.att = act(qd_);
    y.lse = be_.alloc(DType::f32, B_ * cfg.num_heads, T_);
    owned_.push_back(y.lse);
    if (cfg.sandwich_norms) {
      y.ao = act(H_);
      y.rstd_pa = act(1, P, false);
      y.mo = act(H_);
      y.rstd_pf = act(1, P, false);
    }
    y.h_mid = act(H_);
    y.xn2 = act(H_);
    y.rstd2 = act(1, P, false);
    y.gu = act(2 * F_);
    y.act = act(F_);
    h_prev = act(H_);  // this layer's output, the next one's input
  }
  h_final_ = h_prev;
  xnf_ = act(H_);
  rstdf_ = act(1, P, false);
  setup_head();
  dh_ = act(H_);
  dtmp_ = act(H_);
  dxn_ = act(H_);
  dact_ = act(F_);
  dgu_ = act(2 * F_);
  datt_ = act(qd_);
  dqkv_ = act(qkv_cols);

  // RoPE tables [T, hd/2], as the engine computes them: f32 angle pos * inv_freq, cos/sin in double.
  auto tables = [&](const engine::RopeConfig& rc, Mat& cs, Mat& sn) {
    const std::vector<float> inv = engine::rope_inv_freq(rc, hd_);
    const int64_t half = hd_ / 2;
    std::vector<double> c(size_t(T_ * half)), s(size_t(T_ * half));
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const float ang = float(t) * inv[size_t(i)];
        c[size_t(t * half + i)] = double(float(std::cos(double(ang))) * float(rc.attention_factor));
        s[size_t(t * half + i)] = double(float(std::sin(double(ang))) * float(rc.attention_factor));
      }
    cs = be_.alloc(be_.act_dtype(), T_, half);
    sn = be_.alloc(be_.act_dtype(), T_, half);
    owned_.push_back(cs);
    owned_.push_back(sn);
    upload_converted(be_, cs, c);
    upload_converted(be_, sn, s);
  };
  tables(cfg.rope_global, cos_g_, sin_g_);
  tables(cfg.rope_local, cos_l_, sin_l_);
}

// The parameter and gradient buffers of the table, and the views both families share: embedding, (tied) lm_head,
// final norm.
void TrainModel::alloc_params(const std::string& embed_name, const std::string& final_norm_name) {
  const DType P = be_.param_dtype();
  params_ = be_.alloc(P, 1, table_.size());
  grads_ = be_.alloc(P, 1, table_.size());
  owned_.push_back(params_);
  owned_.push_back(grads_);
  embed_ = p(embed_name);
  g_embed_ = g(embed_name);
  lm_head_ = cfg_.tie_embeddings ? embed_ : p("lm_head.weight");
  g_lm_head_ = cfg_.tie_embeddings ? g_embed_ : g("lm_head.weight");
  final_norm_ = p(final_norm_name);
  g_final_norm_ = g(final_norm_name);
}

void TrainModel::setup_head() {
  const int64_t N = B_ * T_;
  ids_ = be_.alloc(DType::i32, N, 1);
  targets_ = be_.alloc(DType::i32, N, 1);
  owned_.push_back(ids_);
  owned_.push_back(targets_);
  // Logit chunks of about 4M elements (16 MB in f32).
  chunk_rows_ = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(4) << 20) / V_));
  logits_chunk_ = be_.alloc(be_.param_dtype(), chunk_rows_, V_);
  losses_ = be_.alloc(be_.param_dtype(), chunk_rows_, 1);
  owned_.push_back(logits_chunk_);
  owned_.push_back(losses_);
}

TrainModel::~TrainModel() {
  for (Mat& m : owned_) be_.free(m);
}

Mat TrainModel::p(const std::string& name) {
  const ParamEntry* e = table_.find(name);
  if (!e) fail(Status::internal, "train: no parameter " + name);
  const int64_t rows = e->shape.size() == 2 ? e->shape[0] : 1;
  return params_.view(e->offset, rows, e->numel() / rows);
}
Mat TrainModel::g(const std::string& name) {
  const ParamEntry* e = table_.find(name);
  const int64_t rows = e->shape.size() == 2 ? e->shape[0] : 1;
  return grads_.view(e->offset, rows, e->numel() / rows);
}
Mat TrainModel::act(int64_t cols, DType dt, bool act_type) {
  Mat m = be_.alloc(act_type ? be_.act_dtype() : dt, B_ * T_, cols);
  owned_.push_back(m);
  return m;
}

void TrainModel::init_weights(uint64_t seed) {
  if (mamba()) return init_mamba(seed);
  std::vector<double> host(size_t(table_.size()), 0.0);
  const double std0 = 0.02, std_res = 0.02 / std::sqrt(2.0 * double(cfg_.num_layers));
  const double norm_value = cfg_.norm_plus_one ? 0.0 : 1.0;
  uint64_t stream = 0;
  for (const ParamEntry& e : table_.entries()) {
    Rng rng(seed, ++stream);  // one stream per tensor: adding a tensor does not shift the others
    const bool is_norm = e.shape.size() == 1;
    const bool residual = e.name.find("o_proj") != std::string::npos || e.name.find("down_proj") != std::string::npos;
    for (int64_t i = 0; i < e.numel(); ++i)
      host[size_t(e.offset + i)] = is_norm ? norm_value : rng.normal() * (residual ? std_res : std0);
  }
  upload_converted(be_, params_, host);
  be_.params_updated(params_);
}

double TrainModel::memory_bytes(const engine::ModelConfig& c, int64_t batch, int64_t seq) {
  if (c.arch == engine::Arch::mamba) return mamba_memory_bytes(c, batch, seq);
  const double H = double(c.hidden_size), F = double(c.intermediate_size), qd = double(c.num_heads * c.head_dim),
               kvd = double(c.num_kv_heads * c.head_dim), V = double(c.vocab_size), L = double(c.num_layers);
  const double qkv = qd + 2 * kvd;
  const double params = L * (qkv * H + qd * H + 3 * F * H + 4 * H) + V * H * (c.tie_embeddings ? 1 : 2) + H;
  // per row and layer: h_in, xn1, qkv (x2 with q/k norms), att, h_mid, xn2, gate|up, act (+ ao, mo for Gemma)
  const double per_row_layer = 5 * H + qkv * (c.qk_norm ? 2 : 1) + qd + 3 * F + (c.sandwich_norms ? 2 * H : 0);
  const double per_row_scratch = 5 * H + 3 * F + qd + qkv;
  const double rows = double(batch) * double(seq);
  return 4.0 * (2 * params + rows * (L * per_row_layer + per_row_scratch) + double(int64_t(4) << 20));
}

double TrainModel::flops_per_token(int64_t seq) const {
  if (mamba()) return mamba_flops_per_token(cfg_);
  // 6 FLOPs per weight per token (forward 2, backward 4) for every matmul weight (the lm_head included, the
  // embedding lookup not), plus the attention scores and values: forward 2 * 2 * qd * (average visible keys).
  double matmul_params = 0;
  for (const ParamEntry& e : table_.entries())
    if (e.shape.size() == 2 && e.name != "model.embed_tokens.weight") matmul_params += double(e.numel());
  if (cfg_.tie_embeddings) matmul_params += double(V_ * H_);
  double attn = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const double keys = layers_[l].sliding && cfg_.sliding_window > 0
                            ? std::min<double>(double(cfg_.sliding_window), double(seq + 1) / 2)
                            : double(seq + 1) / 2;
    attn += 3.0 * 4.0 * double(qd_) * keys;
  }
  return 6.0 * matmul_params + attn;
}

void TrainModel::forward(int64_t b, int64_t t) {
  if (mamba()) return forward_mamba(b, t);
  Backend& be = be_;
  const engine::ModelConfig& c = cfg_;
  const int64_t N = b * t;
  const float eps = float(c.rms_norm_eps);
  const bool p1 = c.norm_plus_one;
  const Act actk = c.activation == "silu" ? Act::silu : Act::gelu_tanh;
  auto rows = [N](const Mat& m) { return m.row_slice(0, N); };
  be.embedding_fwd(rows(ids_), embed_, rows(layers_.empty() ? h_final_ : layers_[0].h_in), float(c.embed_scale));
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer& y = layers_[li];
    const Mat h = rows(y.h_in), out = li + 1 < layers_.size() ? rows(layers_[li + 1].h_in) : rows(h_final_);
    be.rmsnorm_fwd(h, y.in_norm, rows(y.xn1), rows(y.rstd1), H_, eps, p1);
    const Mat qkv = rows(y.qkv);
    if (c.qk_norm) {
      const Mat raw = rows(y.qkv_raw);
      be.matmul(rows(y.xn1), false, y.wqkv, true, raw, 1.f, 0.f);
      be.rmsnorm_fwd(raw.col_slice(0, qd_), y.q_norm, qkv.col_slice(0, qd_), rows(y.rstd_q), hd_, eps, p1);
      be.rmsnorm_fwd(raw.col_slice(qd_, kvd_), y.k_norm, qkv.col_slice(qd_, kvd_), rows(y.rstd_k), hd_, eps, p1);
      be.copy(qkv.col_slice(qd_ + kvd_, kvd_), raw.col_slice(qd_ + kvd_, kvd_));
    } else {
      be.matmul(rows(y.xn1), false, y.wqkv, true, qkv, 1.f, 0.f);
    }
    const Mat& cs = y.sliding ? cos_l_ : cos_g_;
    const Mat& sn = y.sliding ? sin_l_ : sin_g_;
    be.rope_fwd(qkv.col_slice(0, qd_), t, c.num_heads, hd_, cs, sn);
    be.rope_fwd(qkv.col_slice(qd_, kvd_), t, c.num_kv_heads, hd_, cs, sn);
    AttnShape as{b, t, c.num_heads, c.num_kv_heads, hd_, float(c.attn_scale), float(c.attn_softcap),
                 y.sliding ? c.sliding_window : 0};
    be.attention_fwd(qkv.col_slice(0, qd_), qkv.col_slice(qd_, kvd_), qkv.col_slice(qd_ + kvd_, kvd_), rows(y.att),
                     y.lse.row_slice(0, b * c.num_heads), as);
    const Mat hm = rows(y.h_mid);
    be.copy(hm, h);
    if (c.sandwich_norms) {
      be.matmul(rows(y.att), false, y.wo, true, rows(y.ao), 1.f, 0.f);
      be.rmsnorm_fwd(rows(y.ao), y.post_attn_norm, rows(dtmp_), rows(y.rstd_pa), H_, eps, p1);
      be.add_inplace(hm, rows(dtmp_));
      be.rmsnorm_fwd(hm, y.pre_ff_norm, rows(y.xn2), rows(y.rstd2), H_, eps, p1);
    } else {
      be.matmul(rows(y.att), false, y.wo, true, rows(dtmp_), 1.f, 0.f);
      be.add_inplace(hm, rows(dtmp_));
      be.rmsnorm_fwd(hm, y.post_attn_norm, rows(y.xn2), rows(y.rstd2), H_, eps, p1);
    }
    be.matmul(rows(y.xn2), false, y.wgu, true, rows(y.gu), 1.f, 0.f);
    be.gated_act_fwd(rows(y.gu), rows(y.act), actk);
    be.copy(out, hm);
    if (c.sandwich_norms) {
      be.matmul(rows(y.act), false, y.wdown, true, rows(y.mo), 1.f, 0.f);
      be.rmsnorm_fwd(rows(y.mo), y.post_ff_norm, rows(dtmp_), rows(y.rstd_pf), H_, eps, p1);
      be.add_inplace(out, rows(dtmp_));
    } else {
      be.matmul(rows(y.act), false, y.wdown, true, rows(dtmp_), 1.f, 0.f);
      be.add_inplace(out, rows(dtmp_));
    }
  }
  be.rmsnorm_fwd(rows(h_final_), final_norm_, rows(xnf_), rows(rstdf_), H_, eps, p1);
}

// Chunks of rows: logits = xnf . W_lm^T -> loss, dlogits (in place) -> dxnf = dlogits . W_lm, dW_lm += dlogits^T xnf.
LossSum TrainModel::loss_head(int64_t b, int64_t t, bool backward, float grad_scale) {
  Backend& be = be_;
  const int64_t N = b * t;
  LossSum ls;
  loss_host_.resize(size_t(chunk_rows_));
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows_) {
    const int64_t R = std::min(chunk_rows_, N - r0);
    const Mat lg = logits_chunk_.row_slice(0, R), x = xnf_.row_slice(r0, R);
    be.matmul(x, false, lm_head_, true, lg, 1.f, 0.f);
    be.cross_entropy_chunk(lg, targets_.row_slice(r0, R), losses_.row_slice(0, R), float(cfg_.final_softcap),
                           grad_scale);
    download_converted(be, losses_.row_slice(0, R), loss_host_.data());
    for (int64_t i = 0; i < R; ++i) ls.sum += loss_host_[size_t(i)];
    if (backward) {
      be.matmul(lg, false, lm_head_, false, dxn_.row_slice(r0, R), 1.f, 0.f);
      be.matmul(lg, true, x, false, g_lm_head_, 1.f, 1.f);
    }
  }
  return ls;
}

void TrainModel::backward(int64_t b, int64_t t) {
  if (mamba()) return backward_mamba(b, t);
  Backend& be = be_;
  const engine::ModelConfig& c = cfg_;
  const int64_t N = b * t;
  const bool p1 = c.norm_plus_one;
  const Act actk = c.activation == "silu" ? Act::silu : Act::gelu_tanh;
  auto rows = [N](const Mat& m) { return m.row_slice(0, N); };
  const Mat dh = rows(dh_), dtmp = rows(dtmp_), dxn = rows(dxn_), dact = rows(dact_), dgu = rows(dgu_),
            datt = rows(datt_), dqkv = rows(dqkv_);
  // dxn holds d loss / d xnf (from loss_head).
  be.rmsnorm_bwd(dxn, rows(h_final_), final_norm_, rows(rstdf_), dh, g_final_norm_, H_, p1, false);
  for (size_t li = layers_.size(); li-- > 0;) {
    Layer& y = layers_[li];
    Mat dmo = dh;
    if (c.sandwich_norms) {
      be.rmsnorm_bwd(dh, rows(y.mo), y.post_ff_norm, rows(y.rstd_pf), dtmp, y.g_post_ff_norm, H_, p1, false);
      dmo = dtmp;
    }
    be.matmul(dmo, false, y.wdown, false, dact, 1.f, 0.f);
    be.matmul(dmo, true, rows(y.act), false, y.g_wdown, 1.f, 1.f);
    be.gated_act_bwd(dact, rows(y.gu), dgu, actk);
    be.matmul(dgu, false, y.wgu, false, dxn, 1.f, 0.f);
    be.matmul(dgu, true, rows(y.xn2), false, y.g_wgu, 1.f, 1.f);
    if (c.sandwich_norms)
      be.rmsnorm_bwd(dxn, rows(y.h_mid), y.pre_ff_norm, rows(y.rstd2), dh, y.g_pre_ff_norm, H_, p1, true);
    else
      be.rmsnorm_bwd(dxn, rows(y.h_mid), y.post_attn_norm, rows(y.rstd2), dh, y.g_post_attn_norm, H_, p1, true);
    Mat dao = dh;
    if (c.sandwich_norms) {
      be.rmsnorm_bwd(dh, rows(y.ao), y.post_attn_norm, rows(y.rstd_pa), dtmp, y.g_post_attn_norm, H_, p1, false);
      dao = dtmp;
    }
    be.matmul(dao, false, y.wo, false, datt, 1.f, 0.f);
    be.matmul(dao, true, rows(y.att), false, y.g_wo, 1.f, 1.f);
    const Mat qkv = rows(y.qkv);
    AttnShape as{b, t, c.num_heads, c.num_kv_heads, hd_, float(c.attn_scale), float(c.attn_softcap),
                 y.sliding ? c.sliding_window : 0};
    const Mat dq = dqkv.col_slice(0, qd_), dk = dqkv.col_slice(qd_, kvd_), dv = dqkv.col_slice(qd_ + kvd_, kvd_);
    be.attention_bwd(datt, qkv.col_slice(0, qd_), qkv.col_slice(qd_, kvd_), qkv.col_slice(qd_ + kvd_, kvd_),
                     rows(y.att), y.lse.row_slice(0, b * c.num_heads), dq, dk, dv, as);
    const Mat& cs = y.sliding ? cos_l_ : cos_g_;
    const Mat& sn = y.sliding ? sin_l_ : sin_g_;
    be.rope_bwd(dq, t, c.num_heads, hd_, cs, sn);
    be.rope_bwd(dk, t, c.num_kv_heads, hd_, cs, sn);
    if (c.qk_norm) {
      const Mat raw = rows(y.qkv_raw);
      be.rmsnorm_bwd(dq, raw.col_slice(0, qd_), y.q_norm, rows(y.rstd_q), dq, y.g_q_norm, hd_, p1, false);
      be.rmsnorm_bwd(dk, raw.col_slice(qd_, kvd_), y.k_norm, rows(y.rstd_k), dk, y.g_k_norm, hd_, p1, false);
    }
    be.matmul(dqkv, false, y.wqkv, false, dxn, 1.f, 0.f);
    be.matmul(dqkv, true, rows(y.xn1), false, y.g_wqkv, 1.f, 1.f);
    be.rmsnorm_bwd(dxn, rows(y.h_in), y.in_norm, rows(y.rstd1), dh, y.g_in_norm, H_, p1, true);
    if (layer_grads_hook_) layer_grads_hook_(int64_t(li));
  }
  be.embedding_bwd(rows(ids_), dh, g_embed_, float(c.embed_scale));
}

LossSum TrainModel::step(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t, bool backward,
                         float grad_scale) {
  if (b < 1 || b > B_ || t < 1 || t > T_)
    bad("train step: " + std::to_string(b) + " x " + std::to_string(t) + " tokens do not fit the model's buffers (" +
        std::to_string(B_) + " x " + std::to_string(T_) + ")");
  const int64_t N = b * t;
  be_.upload(ids_, ids, size_t(N) * 4);
  be_.upload(targets_, targets, size_t(N) * 4);
  LossSum ls;
  for (int64_t i = 0; i < N; ++i) ls.count += targets[i] >= 0;
  forward(b, t);
  ls.sum = loss_head(b, t, backward, grad_scale).sum;
  if (backward) this->backward(b, t);
  return ls;
}

void TrainModel::logits(const int32_t* ids, int64_t b, int64_t t, void* out) {
  if (b < 1 || b > B_ || t < 1 || t > T_) bad("logits: batch does not fit the model's buffers");
  const int64_t N = b * t;
  be_.upload(ids_, ids, size_t(N) * 4);
  forward(b, t);
  const int64_t es = dtype_size(be_.param_dtype());
  std::vector<double> capped;
  for (int64_t r0 = 0; r0 < N; r0 += chunk_rows_) {
    const int64_t R = std::min(chunk_rows_, N - r0);
    const Mat lg = logits_chunk_.row_slice(0, R);
    be_.matmul(xnf_.row_slice(r0, R), false, lm_head_, true, lg, 1.f, 0.f);
    char* dst = static_cast<char*>(out) + r0 * V_ * es;
    be_.download(dst, lg, size_t(R * V_ * es));
    if (cfg_.final_softcap > 0) {
      const double cap = cfg_.final_softcap;
      for (int64_t i = 0; i < R * V_; ++i) {
        if (es == 4) {
          float& v = reinterpret_cast<float*>(dst)[i];
          v = std::tanh(v / float(cap)) * float(cap);
        } else {
          double& v = reinterpret_cast<double*>(dst)[i];
          v = std::tanh(v / cap) * cap;
        }
      }
    }
  }
}

}  // namespace flashkit::train
