// The trainable decoder: the engine's architectures (Llama-style, Gemma-3-style and Mamba-1) from one
// engine::ModelConfig,
// with the forward and backward schedule over a train::Backend. The forward is the engine's schedule
// (src/engine/model.cpp) op for op, so a trained model exported as a Hugging Face directory gives the engine's
// logits. The loss is cross-entropy fused with the lm_head in chunks of rows: the [tokens, vocab] logits are never
// materialized (per chunk: logits -> loss and dlogits -> dX and dW_lm, then discarded).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/config.hpp"
#include "train/arena.hpp"
#include "train/backend.hpp"

namespace flashkit::train {

// Throws invalid_argument naming the field for configurations the trainer does not support (qwen, biases, ...).
void check_trainable(const engine::ModelConfig& c, const std::string& where);

// The Mamba parts of TrainModel::memory_bytes and flops_per_token (model_mamba.cpp).
double mamba_memory_bytes(const engine::ModelConfig& c, int64_t batch, int64_t seq);
double mamba_flops_per_token(const engine::ModelConfig& c);

struct LossSum {
  double sum = 0;    // summed token losses
  int64_t count = 0; // targets that were not -1
};

class TrainModel {
 public:
  // Buffers for micro-batches of up to `batch` sequences of up to `seq` tokens.
  TrainModel(const engine::ModelConfig& cfg, Backend& be, int64_t batch, int64_t seq);
  ~TrainModel();
  TrainModel(const TrainModel&) = delete;
  TrainModel& operator=(const TrainModel&) = delete;

  const engine::ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return be_; }
  const Mat& params() const { return params_; }
  const Mat& grads() const { return grads_; }
  int64_t max_batch() const { return B_; }
  int64_t max_seq() const { return T_; }

  // GPT-2-style initialisation from `seed`: N(0, 0.02) for matrices and embeddings, residual output projections
  // (o_proj, down_proj) scaled by 1/sqrt(2 * layers), norm weights 1 (0 for Gemma's 1 + w). Deterministic.
  void init_weights(uint64_t seed);

  // One micro-batch of b <= batch sequences of t <= seq tokens: ids and targets are host arrays of b * t ids,
  // row-major; a target of -1 is ignored. Returns the summed loss; with backward, grads += d(sum * grad_scale).
  LossSum step(const int32_t* ids, const int32_t* targets, int64_t b, int64_t t, bool backward, float grad_scale);

  // Called by the backward with each layer's index as soon as that layer's parameter gradients are final (last
  // layer first), so a data-parallel run can all-reduce them while the backward goes on. Empty: no calls.
  void set_layer_grads_hook(std::function<void(int64_t layer)> hook) { layer_grads_hook_ = std::move(hook); }

  // Logits of every position, host [b * t, vocab] in the parameter dtype (f32 or f64); tests and evaluation.
  void logits(const int32_t* ids, int64_t b, int64_t t, void* out);

  // Bytes of backend memory a model of this config needs for micro-batches of batch x seq (parameters, gradients,
  // saved activations, scratch; the two Adam moments not included), in f32 -- to refuse a recipe up front.
  static double memory_bytes(const engine::ModelConfig& cfg, int64_t batch, int64_t seq);

  // Model FLOPs per trained token (forward + backward, matmuls and attention scores; for MFU).
  double flops_per_token(int64_t seq) const;

 private:
  struct Layer {
    // parameter views (into params_) and their gradients (same offsets in grads_)
    Mat in_norm, post_attn_norm, pre_ff_norm, post_ff_norm, q_norm, k_norm, wqkv, wo, wgu, wdown;
    Mat g_in_norm, g_post_attn_norm, g_pre_ff_norm, g_post_ff_norm, g_q_norm, g_k_norm, g_wqkv, g_wo, g_wgu, g_wdown;
    // saved activations of the last forward
    Mat h_in, xn1, rstd1, qkv_raw, rstd_q, rstd_k, qkv, att, lse, ao, rstd_pa, h_mid, xn2, rstd2, gu, act, mo, rstd_pf;
    bool sliding = false;
    // Mamba mixer (model_type mamba, model_mamba.cpp): parameters, gradients, saved activations (with h_in, xn1,
    // rstd1 above): xz = in_proj(xn1) [x | z], xc = silu(conv(x)), dbc = x_proj(xc) [dt | B | C], delta =
    // dt_proj(dt) without its bias (the scan adds it), y = the scan's gated output.
    Mat w_in, conv_w, conv_b, w_x, w_dt, dt_bias, A_log, Dp, w_out;
    Mat g_w_in, g_conv_w, g_conv_b, g_w_x, g_w_dt, g_dt_bias, g_A_log, g_Dp, g_w_out;
    Mat xz, xc, dbc, delta, ssm_y;
  };
  bool mamba() const { return cfg_.arch == engine::Arch::mamba; }
  void setup_mamba();
  void init_mamba(uint64_t seed);
  void forward_mamba(int64_t b, int64_t t);
  void backward_mamba(int64_t b, int64_t t);
  void alloc_params(const std::string& embed_name, const std::string& final_norm_name);
  void setup_head();  // ids, targets, logit chunk, losses (both families)
  void forward(int64_t b, int64_t t);
  void backward(int64_t b, int64_t t);
  LossSum loss_head(int64_t b, int64_t t, bool backward, float grad_scale);
  Mat p(const std::string& name);
  Mat g(const std::string& name);
  Mat act(int64_t cols, DType dt = DType::f32, bool act_type = true);

  engine::ModelConfig cfg_;
  Backend& be_;
  int64_t B_, T_, H_, F_, hd_, qd_, kvd_, V_;
  ParamTable table_;
  Mat params_, grads_;
  Mat embed_, g_embed_, lm_head_, g_lm_head_, final_norm_, g_final_norm_;
  std::vector<Layer> layers_;
  Mat cos_g_, sin_g_, cos_l_, sin_l_;
  Mat ids_, targets_, h_final_, xnf_, rstdf_;
  Mat dh_, dtmp_, dxn_, dact_, dgu_, datt_, dqkv_, logits_chunk_, losses_;
  Mat dxz_, dxc_, ddbc_, ddelta_, dy_;  // Mamba backward scratch
  int64_t chunk_rows_ = 0;
  std::vector<Mat> owned_;
  std::vector<double> loss_host_;
  std::function<void(int64_t)> layer_grads_hook_;
};

}  // namespace flashkit::train
