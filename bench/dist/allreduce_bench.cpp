// All-reduce bus bandwidth against message size, as nccl-tests reports it: algbw = bytes / time, busbw = algbw *
// 2 (n - 1) / n (the bytes each rank's link carries in a ring). Beside each measurement, the ring model's
// prediction from the link bandwidth (--link-gbs): busbw_pred = link / (1 + latency * link / (bytes * 2(n-1)/n)),
// i.e. time = 2(n-1)/n * bytes / link + 2(n-1) * latency.
//
//   flashkit_allreduce_bench [--comm threads|nccl] [--ranks N] [--device cpu|cuda] [--dtype f32|bf16]
//                            [--min-bytes B] [--max-bytes B] [--iters N] [--link-gbs G] [--latency-us U] [--json FILE]
// --comm nccl --ranks N re-executes itself for ranks 1..N-1 (src/dist/launch.hpp), one GPU each; with N = 1 it
// measures NCCL's single-rank path (a device copy). --comm threads runs N thread ranks in this process (host
// buffers, or device buffers staged through the host with --device cuda).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm.hpp"
#include "dist/launch.hpp"
#include "flashkit/error.hpp"
#ifdef FLASHKIT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fd = flashkit::dist;
using flashkit::DType;

namespace {

struct Options {
  std::string comm = "threads", device = "cpu", json;
  DType dtype = DType::f32;
  int ranks = 1, iters = 20, warmup = 5;
  double min_bytes = 1024, max_bytes = 64.0 * (1 << 20), link_gbs = 0, latency_us = 5;
};

[[noreturn]] void usage(const std::string& m) {
  std::fprintf(stderr, "flashkit_allreduce_bench: %s\n", m.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--comm") o.comm = next();
    else if (a == "--device") o.device = next();
    else if (a == "--dtype") {
      const std::string d = next();
      if (d == "f32") o.dtype = DType::f32;
      else if (d == "bf16") o.dtype = DType::bf16;
      else usage("--dtype: expected f32 or bf16, got " + d);
    } else if (a == "--ranks") o.ranks = std::atoi(next().c_str());
    else if (a == "--iters") o.iters = std::atoi(next().c_str());
    else if (a == "--min-bytes") o.min_bytes = std::atof(next().c_str());
    else if (a == "--max-bytes") o.max_bytes = std::atof(next().c_str());
    else if (a == "--link-gbs") o.link_gbs = std::atof(next().c_str());
    else if (a == "--latency-us") o.latency_us = std::atof(next().c_str());
    else if (a == "--json") o.json = next();
    else usage("unknown option " + a);
  }
  if (o.comm != "threads" && o.comm != "nccl") usage("--comm: expected threads or nccl, got " + o.comm);
  if (o.device != "cpu" && o.device != "cuda") usage("--device: expected cpu or cuda, got " + o.device);
  if (o.comm == "nccl") o.device = "cuda";
  if (o.ranks < 1 || o.ranks > 64) usage("--ranks: expected 1..64, got " + std::to_string(o.ranks));
  if (o.iters < 1) usage("--iters: expected >= 1");
  if (!(o.min_bytes >= 4) || o.max_bytes < o.min_bytes) usage("--min-bytes / --max-bytes: expected 4 <= min <= max");
  return o;
}

// A buffer of `bytes` on the device or the host, filled with ones (never zeros: a sum of zeros hides no bug).
struct Buffer {
  void* p = nullptr;
  bool device = false;
  Buffer(std::size_t bytes, bool on_device, DType dt) : device(on_device) {
    std::vector<unsigned char> host(bytes);
    const std::size_t n = bytes / std::size_t(flashkit::dtype_size(dt));
    for (std::size_t i = 0; i < n; ++i) {
      if (dt == DType::f32) reinterpret_cast<float*>(host.data())[i] = 1.f;
      else reinterpret_cast<uint16_t*>(host.data())[i] = flashkit::f32_to_bf16(1.f);
    }
#ifdef FLASHKIT_WITH_CUDA
    if (device) {
      if (cudaMalloc(&p, bytes) != cudaSuccess) usage("cudaMalloc failed");
      cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice);
      return;
    }
#else
    if (device) usage("--device cuda: this build has no CUDA");
#endif
    p = std::malloc(bytes);
    std::memcpy(p, host.data(), bytes);
  }
  ~Buffer() {
#ifdef FLASHKIT_WITH_CUDA
    if (device) {
      cudaFree(p);
      return;
    }
#endif
    std::free(p);
  }
};

void sync_device() {
#ifdef FLASHKIT_WITH_CUDA
  cudaDeviceSynchronize();
#endif
}

// Seconds per all-reduce of `count` elements on this rank's communicator (every rank runs the same loop).
double time_all_reduce(fd::Communicator& c, void* buf, std::size_t count, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) c.all_reduce_sum(buf, count, o.dtype);
  if (o.device == "cuda") sync_device();
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) c.all_reduce_sum(buf, count, o.dtype);
  if (o.device == "cuda") sync_device();
  c.barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.iters;
}

std::vector<std::size_t> sizes(const Options& o) {
  std::vector<std::size_t> out;
  const std::size_t es = std::size_t(flashkit::dtype_size(o.dtype));
  for (double b = o.min_bytes; b <= o.max_bytes; b *= 2) out.push_back(std::size_t(b) / es * es);
  return out;
}

// Rank 0 prints one row per size and writes the JSON lines.
void report(const Options& o, int n, const std::vector<std::size_t>& bytes, const std::vector<double>& secs) {
  std::ofstream json;
  if (!o.json.empty()) json.open(o.json);
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  std::printf("# all-reduce sum, comm %s, %d rank(s), %s, device %s; busbw = algbw * 2(n-1)/n\n", o.comm.c_str(), n,
              std::string(flashkit::dtype_name(o.dtype)).c_str(), o.device.c_str());
  std::printf("%12s %12s %10s %12s %12s %14s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
              "pred_busbw");
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const double algbw = double(bytes[i]) / secs[i] / 1e9, busbw = algbw * factor;
    double pred = -1;
    if (o.link_gbs > 0 && n > 1) {
      const double t = factor * double(bytes[i]) / (o.link_gbs * 1e9) + 2.0 * (n - 1) * o.latency_us * 1e-6;
      pred = double(bytes[i]) * factor / t / 1e9;
    }
    char pbuf[32] = "-";
    if (pred >= 0) std::snprintf(pbuf, sizeof pbuf, "%.2f", pred);
    std::printf("%12zu %12zu %10.2f %12.3f %12.3f %14s\n", bytes[i], bytes[i] / std::size_t(flashkit::dtype_size(o.dtype)),
                secs[i] * 1e6, algbw, busbw, pbuf);
    if (json)
      json << "{\"comm\":\"" << o.comm << "\",\"ranks\":" << n << ",\"bytes\":" << bytes[i] << ",\"time_us\":"
           << secs[i] * 1e6 << ",\"algbw_gbs\":" << algbw << ",\"busbw_gbs\":" << busbw
           << ",\"pred_busbw_gbs\":" << (pred >= 0 ? std::to_string(pred) : "null") << "}\n";
  }
}

int run_threads(const Options& o) {
  auto comms = fd::make_thread_ranks(o.ranks);
  const auto bytes = sizes(o);
  std::vector<double> secs(bytes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        Buffer b(bytes[i], o.device == "cuda", o.dtype);
        const double t = time_all_reduce(*comms[size_t(r)], b.p, bytes[i] / std::size_t(flashkit::dtype_size(o.dtype)), o);
        if (r == 0) secs[i] = t;
      }
    });
  for (auto& t : threads) t.join();
  report(o, o.ranks, bytes, secs);
  return 0;
}

int run_nccl(const Options& o, int argc, char** argv) {
  fd::RankEnv env = fd::rank_env();
  std::unique_ptr<fd::RankLauncher> launcher;
  if (!env.launched) {
    env.world_size = o.ranks;
    env.rendezvous = "/tmp/flashkit-allreduce-bench-" + std::to_string(::getpid());
    std::remove(env.rendezvous.c_str());
    if (o.ranks > 1)
      launcher = std::make_unique<fd::RankLauncher>(fd::self_exe(), std::vector<std::string>(argv, argv + argc),
                                                    o.ranks, env.rendezvous);
  }
  const fd::NcclId id = o.ranks == 1 && !env.launched ? fd::nccl_unique_id()
                                                      : fd::exchange_nccl_id(env.rendezvous, env.rank);
  auto comm = fd::make_nccl(env.rank, env.world_size, env.local_rank, id);
  const auto bytes = sizes(o);
  std::vector<double> secs(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    Buffer b(bytes[i], true, o.dtype);
    secs[i] = time_all_reduce(*comm, b.p, bytes[i] / std::size_t(flashkit::dtype_size(o.dtype)), o);
  }
  if (env.rank == 0) report(o, env.world_size, bytes, secs);
  comm.reset();
  if (launcher) {
    const std::string failed = fd::describe_failures(launcher->wait());
    std::remove(env.rendezvous.c_str());
    if (!failed.empty()) usage(failed);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return o.comm == "threads" ? run_threads(o) : run_nccl(o, argc, argv);
  } catch (const flashkit::Error& e) {
    usage(e.what());
  }
}
