// The Mamba-1 family of TrainModel (model_type mamba): the parameter table under transformers' MambaForCausalLM
// names, the initialisation transformers' Mamba uses for the SSM tensors, and the forward / backward schedule of
// the engine's Mamba layers (src/engine/model.cpp): per layer h += out_proj(scan(silu(conv(x)), dt, B, C) * silu(z))
// with [x | z] = in_proj(RMSNorm(h)), [dt | B | C] = x_proj(silu(conv(x))), delta = dt_proj(dt).
#include <algorithm>
#include <cmath>

#include "flashkit/error.hpp"
#include "train/model.hpp"
#include "train/random.hpp"

namespace flashkit::train {

namespace {
// transformers' MambaConfig defaults for the dt initialisation (time_step_min / max / floor, time_step_scale 1).
constexpr double kDtMin = 0.001, kDtMax = 0.1, kDtFloor = 1e-4;
std::string layer_prefix(int64_t l) { return "backbone.layers." + std::to_string(l) + ".mixer."; }
}  // namespace

void TrainModel::setup_mamba() {
  const engine::SsmConfig& s = cfg_.ssm;
  const int64_t L = cfg_.num_layers, Di = s.d_inner, N = s.state_size, R = s.dt_rank, W = s.conv_kernel;
  // Decayed matrices first (A_log and D are not decayed, as transformers' _no_weight_decay marks them).
  for (int64_t l = 0; l < L; ++l) {
    const std::string mx = layer_prefix(l);
    table_.add(mx + "in_proj.weight", {2 * Di, H_}, true);
    table_.add(mx + "conv1d.weight", {Di, 1, W}, true);
    table_.add(mx + "x_proj.weight", {R + 2 * N, Di}, true);
    table_.add(mx + "dt_proj.weight", {Di, R}, true);
    table_.add(mx + "out_proj.weight", {H_, Di}, true);
  }
  if (!cfg_.tie_embeddings) table_.add("lm_head.weight", {V_, H_}, true);
  table_.pad();
  table_.add("backbone.embeddings.weight", {V_, H_}, false);
  for (int64_t l = 0; l < L; ++l) {
    const std::string mx = layer_prefix(l);
    table_.add("backbone.layers." + std::to_string(l) + ".norm.weight", {H_}, false);
    if (s.conv_bias) table_.add(mx + "conv1d.bias", {Di}, false);
    table_.add(mx + "dt_proj.bias", {Di}, false);
    table_.add(mx + "A_log", {Di, N}, false);
    table_.add(mx + "D", {Di}, false);
  }
  table_.add("backbone.norm_f.weight", {H_}, false);
  table_.pad();
  alloc_params("backbone.embeddings.weight", "backbone.norm_f.weight");
  const DType P = be_.param_dtype();

  layers_.resize(size_t(L));
  Mat h_prev = act(H_);
  for (int64_t l = 0; l < L; ++l) {
    Layer& y = layers_[size_t(l)];
    const std::string mx = layer_prefix(l);
    auto pg = [&](const std::string& n, Mat& pv, Mat& gv) {
      pv = p(n);
      gv = g(n);
    };
    pg("backbone.layers." + std::to_string(l) + ".norm.weight", y.in_norm, y.g_in_norm);
    pg(mx + "in_proj.weight", y.w_in, y.g_w_in);
    const ParamEntry* cw = table_.find(mx + "conv1d.weight");  // [Di, 1, W] viewed as [Di, W]
    y.conv_w = params_.view(cw->offset, Di, W);
    y.g_conv_w = grads_.view(cw->offset, Di, W);
    if (s.conv_bias) pg(mx + "conv1d.bias", y.conv_b, y.g_conv_b);
    pg(mx + "x_proj.weight", y.w_x, y.g_w_x);
    pg(mx + "dt_proj.weight", y.w_dt, y.g_w_dt);
    pg(mx + "dt_proj.bias", y.dt_bias, y.g_dt_bias);
    pg(mx + "A_log", y.A_log, y.g_A_log);
    pg(mx + "D", y.Dp, y.g_Dp);
    pg(mx + "out_proj.weight", y.w_out, y.g_w_out);
    y.h_in = h_prev;
    y.xn1 = act(H_);
    y.rstd1 = act(1, P, false);
    y.xz = act(2 * Di);
    y.xc = act(Di);
    y.dbc = act(R + 2 * N);
    y.delta = act(Di);
    y.ssm_y = act(Di);
    h_prev = act(H_);
  }
  h_final_ = h_prev;
  xnf_ = act(H_);
  rstdf_ = act(1, P, false);
  setup_head();
  dh_ = act(H_);
  dxn_ = act(H_);
  dxz_ = act(2 * Di);
  dxc_ = act(Di);
  ddbc_ = act(R + 2 * N);
  ddelta_ = act(Di);
  dy_ = act(Di);
}

void TrainModel::init_mamba(uint64_t seed) {
  const engine::SsmConfig& s = cfg_.ssm;
  std::vector<double> host(size_t(table_.size()), 0.0);
  const double std0 = 0.02, std_res = 0.02 / std::sqrt(2.0 * double(cfg_.num_layers));
  const double conv_bound = 1.0 / std::sqrt(double(s.conv_kernel));  // PyTorch's Conv1d default (fan_in = width)
  const double dt_bound = 1.0 / std::sqrt(double(s.dt_rank));        // time_step_rank^-0.5, init scheme "random"
  auto ends = [](const std::string& n, const char* suffix) {
    const std::string x(suffix);
    return n.size() >= x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
  };
  uint64_t stream = 0;
  for (const ParamEntry& e : table_.entries()) {
    Rng rng(seed, ++stream);
    const std::string& n = e.name;
    for (int64_t i = 0; i < e.numel(); ++i) {
      double v;
      if (ends(n, "norm.weight") || ends(n, "norm_f.weight") || ends(n, ".D")) {
        v = 1.0;
      } else if (ends(n, "A_log")) {
        v = std::log(double(i % s.state_size + 1));  // A = -(1..N) in every channel (S4D-real)
      } else if (ends(n, "conv1d.weight") || ends(n, "conv1d.bias")) {
        v = (2 * rng.uniform() - 1) * conv_bound;
      } else if (ends(n, "dt_proj.weight")) {
        v = (2 * rng.uniform() - 1) * dt_bound;
      } else if (ends(n, "dt_proj.bias")) {
        // dt log-uniform in [dt_min, dt_max] (floored), stored as its inverse softplus so softplus(bias) = dt.
        const double dt = std::max(kDtFloor, std::exp(rng.uniform() * (std::log(kDtMax) - std::log(kDtMin)) +
                                                      std::log(kDtMin)));
        v = dt + std::log(-std::expm1(-dt));
      } else {
        v = rng.normal() * (ends(n, "out_proj.weight") ? std_res : std0);
      }
      host[size_t(e.offset + i)] = v;
    }
  }
  upload_converted(be_, params_, host);
  be_.params_updated(params_);
}

void TrainModel::forward_mamba(int64_t b, int64_t t) {
  Backend& be = be_;
  const engine::SsmConfig& s = cfg_.ssm;
  const int64_t N = b * t, Di = s.d_inner, R = s.dt_rank, Ns = s.state_size;
  const float eps = float(cfg_.rms_norm_eps);
  auto rows = [N](const Mat& m) { return m.row_slice(0, N); };
  be.embedding_fwd(rows(ids_), embed_, rows(layers_.empty() ? h_final_ : layers_[0].h_in), 1.f);
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer& y = layers_[li];
    const Mat h = rows(y.h_in), out = li + 1 < layers_.size() ? rows(layers_[li + 1].h_in) : rows(h_final_);
    const Mat xz = rows(y.xz), xc = rows(y.xc), dbc = rows(y.dbc), delta = rows(y.delta), ys = rows(y.ssm_y);
    be.rmsnorm_fwd(h, y.in_norm, rows(y.xn1), rows(y.rstd1), H_, eps, false);
    be.matmul(rows(y.xn1), false, y.w_in, true, xz, 1.f, 0.f);
    be.conv1d_silu_fwd(xz.col_slice(0, Di), y.conv_w, y.conv_b, xc, t);
    be.matmul(xc, false, y.w_x, true, dbc, 1.f, 0.f);
    be.matmul(dbc.col_slice(0, R), false, y.w_dt, true, delta, 1.f, 0.f);
    be.selective_scan_fwd(xc, delta, y.A_log, dbc.col_slice(R, Ns), dbc.col_slice(R + Ns, Ns), y.Dp,
                          xz.col_slice(Di, Di), y.dt_bias, ys, t);
    be.copy(out, h);
    be.matmul(ys, false, y.w_out, true, out, 1.f, 1.f);  // the residual
  }
  be.rmsnorm_fwd(rows(h_final_), final_norm_, rows(xnf_), rows(rstdf_), H_, eps, false);
}

void TrainModel::backward_mamba(int64_t b, int64_t t) {
  Backend& be = be_;
  const engine::SsmConfig& s = cfg_.ssm;
  const int64_t N = b * t, Di = s.d_inner, R = s.dt_rank, Ns = s.state_size;
  auto rows = [N](const Mat& m) { return m.row_slice(0, N); };
  const Mat dh = rows(dh_), dxn = rows(dxn_), dxz = rows(dxz_), dxc = rows(dxc_), ddbc = rows(ddbc_),
            ddelta = rows(ddelta_), dy = rows(dy_);
  // dxn holds d loss / d xnf (from loss_head); dh carries d loss / d (a layer's output) down the residual.
  be.rmsnorm_bwd(dxn, rows(h_final_), final_norm_, rows(rstdf_), dh, g_final_norm_, H_, false, false);
  for (size_t li = layers_.size(); li-- > 0;) {
    Layer& y = layers_[li];
    const Mat xz = rows(y.xz), xc = rows(y.xc), dbc = rows(y.dbc), delta = rows(y.delta), ys = rows(y.ssm_y);
    be.matmul(dh, false, y.w_out, false, dy, 1.f, 0.f);
    be.matmul(dh, true, ys, false, y.g_w_out, 1.f, 1.f);
    be.selective_scan_bwd(dy, xc, delta, y.A_log, dbc.col_slice(R, Ns), dbc.col_slice(R + Ns, Ns), y.Dp,
                          xz.col_slice(Di, Di), y.dt_bias, dxc, ddelta, ddbc.col_slice(R, Ns),
                          ddbc.col_slice(R + Ns, Ns), dxz.col_slice(Di, Di), y.g_A_log, y.g_Dp, y.g_dt_bias, t);
    be.matmul(ddelta, true, dbc.col_slice(0, R), false, y.g_w_dt, 1.f, 1.f);
    be.matmul(ddelta, false, y.w_dt, false, ddbc.col_slice(0, R), 1.f, 0.f);
    be.matmul(ddbc, false, y.w_x, false, dxc, 1.f, 1.f);  // adds to the scan's du
    be.matmul(ddbc, true, xc, false, y.g_w_x, 1.f, 1.f);
    be.conv1d_silu_bwd(dxc, xz.col_slice(0, Di), y.conv_w, y.conv_b, dxz.col_slice(0, Di), y.g_conv_w, y.g_conv_b, t);
    be.matmul(dxz, false, y.w_in, false, dxn, 1.f, 0.f);
    be.matmul(dxz, true, rows(y.xn1), false, y.g_w_in, 1.f, 1.f);
    be.rmsnorm_bwd(dxn, rows(y.h_in), y.in_norm, rows(y.rstd1), dh, y.g_in_norm, H_, false, true);
    if (layer_grads_hook_) layer_grads_hook_(int64_t(li));
  }
  be.embedding_bwd(rows(ids_), dh, g_embed_, 1.f);
}

double mamba_memory_bytes(const engine::ModelConfig& c, int64_t batch, int64_t seq) {
  const engine::SsmConfig& s = c.ssm;
  const double H = double(c.hidden_size), Di = double(s.d_inner), L = double(c.num_layers),
               dbc = double(s.dt_rank + 2 * s.state_size);
  const double params = double(engine::weight_count(c));
  // per row and layer: h_in, xn1, x|z, xc, dt|B|C, delta, y; scratch: dh, dxn, dx|dz, dxc, ddbc, ddelta, dy and
  // the scan op's contiguous gradients (3 Di + 2 N)
  const double per_row_layer = 2 * H + 5 * Di + dbc;
  const double per_row_scratch = 2 * H + 8 * Di + 2 * dbc + 2 * double(s.state_size);
  const double rows = double(batch) * double(seq);
  return 4.0 * (2 * params + rows * (L * per_row_layer + per_row_scratch) + double(int64_t(4) << 20));
}

double mamba_flops_per_token(const engine::ModelConfig& c) {
  // 6 FLOPs per matmul weight (in_proj, x_proj, dt_proj, out_proj, the lm_head); the conv and the scan (about 9
  // FLOPs per state element forward, twice that backward) are elementwise work, counted as such.
  const engine::SsmConfig& s = c.ssm;
  const double H = double(c.hidden_size), Di = double(s.d_inner);
  const double mm = 2 * Di * H + double(s.dt_rank + 2 * s.state_size) * Di + Di * double(s.dt_rank) + H * Di;
  const double elem = 3.0 * (9.0 * Di * double(s.state_size) + 2.0 * Di * double(s.conv_kernel));
  return double(c.num_layers) * (6.0 * mm + elem) + 6.0 * double(c.vocab_size) * H;
}

}  // namespace flashkit::train
