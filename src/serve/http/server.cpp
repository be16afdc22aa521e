// See server.hpp. One handler thread per connection (cpp-httplib's pool); the engine runs on its own thread and hands
// each request's tokens to the handler through a Channel. Detokenization, stop strings and JSON happen on the handler
// threads, so the engine thread only runs the model and the sampler.
#include "serve/http/server.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <httplib.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "chat/chat_template.hpp"
#include "engine/stop.hpp"
#include "flashkit/error.hpp"

namespace flashkit::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A client-side mistake or a refusal: the HTTP status and OpenAI's error fields.
struct HttpError {
  int status;
  std::string message, type, param, code;
};

[[noreturn]] void reject(int status, const std::string& message, const std::string& param = {},
                         const std::string& code = {}) {
  const char* type = status == 404 ? "not_found_error"
                     : status == 413 ? "invalid_request_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  throw HttpError{status, message, type, param, code};
}

json error_body(const HttpError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(error_body(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// cpp-httplib 0.11 gives handlers no access to their connection's socket, which a handler needs to notice that its
// client went away while the request is still generating. A TCP connection is identified by its two addresses, so
// the handler finds its socket among the process's descriptors by the peer address and port cpp-httplib reports.
int connection_fd(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    char addr[INET6_ADDRSTRLEN] = {};
    int pport = -1, lport = -1;
    if (peer.ss_family == AF_INET) {
      auto* p = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &p->sin_addr, addr, sizeof addr);
      pport = ntohs(p->sin_port);
      lport = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      auto* p = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &p->sin6_addr, addr, sizeof addr);
      pport = ntohs(p->sin6_port);
      lport = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (pport == req.remote_port && lport == req.local_port && req.remote_addr == addr) {
      found = int(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

// The peer closed (or reset) the connection: a read would return end-of-file or an error. A request pipelined behind
// this one reads as data, i.e. "still there".
bool peer_gone(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// The Debian build of cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is compiled into the
// library), so a burst of connections overflows the kernel's accept queue and clients see resets. listen() on a
// listening socket only changes its backlog: find ours (listening, bound to `port`) and raise it.
void raise_listen_backlog(int port, int backlog) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end) continue;
    int acc = 0;
    socklen_t al = sizeof acc;
    if (getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) != 0 || !acc) continue;
    sockaddr_storage local{};
    socklen_t ll = sizeof local;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    const int lport = local.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port)
                      : local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                                                    : -1;
    if (lport == port) ::listen(int(fd), backlog);
  }
  closedir(d);
}

// Tokens of one request, from the engine thread to its handler.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  bool done = false;
  RequestResult result;
};

// The parsed, validated parts of a completion request that the engine and the text side need.
struct GenRequest {
  bool chat = false, stream = false, include_usage = false, return_ids = false;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplingOptions sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// Where the text side of one request stands (detokenizer + stop strings).
struct TextState {
  Tokenizer::StreamDecoder dec;
  engine::StopMatcher stop;
  std::vector<int32_t> ids;
  std::string finish;  // "" while running
  TextState(const Tokenizer& tok, const std::vector<std::string>& stops, std::vector<int32_t> stop_ids)
      : dec(tok.stream_decoder(true)), stop(stops, std::move(stop_ids)) {}
  // Text that may be shown now; sets finish to "stop" when a stop string or id ended it.
  std::string push(int32_t id) {
    ids.push_back(id);
    const engine::StopStep st = stop.push(id, dec.push(id));
    if (st.stop) finish = "stop";
    return st.text;
  }
  std::string end() {  // generation ended for another reason: release what was held back
    if (stop.stopped()) return "";
    engine::StopStep st = stop.push_text(dec.flush());
    return st.text + (st.stop ? "" : stop.flush());
  }
};

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  std::shared_ptr<const Tokenizer> tok;
  ServerOptions opts;
  httplib::Server svr;
  std::optional<chat::ChatTemplate> chat_template;
  std::mutex template_mu;
  std::vector<int32_t> stop_ids;  // the tokenizer's eos ids (the model's come from the engine)
  // The ids that end a request's text: the tokenizer's eos ids, none with ignore_eos (as the engine request does).
  std::vector<int32_t> eos_stops(const GenRequest& g) const { return g.ignore_eos ? std::vector<int32_t>{} : stop_ids; }
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> in_flight{0};
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> http_errors{0}, http_requests{0}, disconnects{0};
  int64_t created = int64_t(now_unix());
  // Rates for /metrics: counter samples, one a second, over the last ten seconds.
  struct Sample {
    Clock::time_point t;
    int64_t prompt, gen;
  };
  std::mutex rate_mu;
  std::deque<Sample> samples;
  std::thread ticker;
  std::atomic<bool> ticker_stop{false};

  Impl(Engine& e, std::shared_ptr<const Tokenizer> t, const ServerOptions& o) : engine(e), tok(std::move(t)), opts(o) {
    if (!tok) fail(Status::invalid_argument, "serve: a tokenizer is required");
    const std::string tmpl = tok->chat_template();
    if (!tmpl.empty()) chat_template.emplace(tmpl);
    stop_ids = tok->eos_ids();
    if (opts.model_id.empty()) opts.model_id = "flashkit";
    routes();
  }

  // ---------------------------------------------------------------- request parsing
  static const json& field(const json& body, const char* name) {
    static const json null = nullptr;
    auto it = body.find(name);
    return it == body.end() ? null : *it;
  }
  static double number(const json& body, const char* name, double def, double lo, double hi, bool lo_open = false) {
    const json& v = field(body, name);
    if (v.is_null()) return def;
    if (!v.is_number()) reject(400, std::string("'") + name + "' must be a number", name);
    const double x = v.get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
      reject(400, std::string("'") + name + "' must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got " + v.dump(-1, ' ', false, json::error_handler_t::replace),
             name);
    return x;
  }

  GenRequest parse(const httplib::Request& req, bool chat) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      reject(400, std::string("the request body is not valid JSON: ") + e.what());
    }
    if (!body.is_object()) reject(400, "the request body must be a JSON object");
    GenRequest g;
    g.chat = chat;
    const json& model = field(body, "model");
    if (!model.is_null() && (!model.is_string() || model.get<std::string>() != opts.model_id))
      reject(404, "the model '" + (model.is_string() ? model.get<std::string>() : model.dump(-1, ' ', false, json::error_handler_t::replace)) +
                      "' does not exist; this server serves '" + opts.model_id + "'",
             "model", "model_not_found");
    const json& n = field(body, "n");
    if (!n.is_null() && !(n.is_number_integer() && n.get<int64_t>() == 1)) reject(400, "only 'n': 1 is supported", "n");
    for (const char* unsupported : {"logprobs", "top_logprobs", "best_of", "suffix", "echo", "tools", "functions", "logit_bias"}) {
      const json& v = field(body, unsupported);
      if (!v.is_null() && !(v.is_boolean() && !v.get<bool>()))
        reject(400, std::string("'") + unsupported + "' is not supported by this server", unsupported);
    }
    for (const char* pen : {"presence_penalty", "frequency_penalty"})
      if (number(body, pen, 0, -2, 2) != 0) reject(400, std::string("'") + pen + "' is not supported (use 0)", pen);
    const json& stream = field(body, "stream");
    if (!stream.is_null() && !stream.is_boolean()) reject(400, "'stream' must be a boolean", "stream");
    g.stream = stream.is_boolean() && stream.get<bool>();
    const json& so = field(body, "stream_options");
    if (so.is_object() && so.contains("include_usage")) g.include_usage = so["include_usage"].is_boolean() && so["include_usage"].get<bool>();
    const json& rid = field(body, "return_token_ids");
    g.return_ids = rid.is_boolean() && rid.get<bool>();
    g.sampling.temperature = float(number(body, "temperature", 1.0, 0, 2));
    g.sampling.top_p = float(number(body, "top_p", 1.0, 0, 1, true));
    g.sampling.min_p = float(number(body, "min_p", 0.0, 0, 1));
    g.sampling.top_k = int(number(body, "top_k", 0, -1, 1 << 30));
    if (g.sampling.top_k < 0) g.sampling.top_k = 0;  // vLLM spells "off" as -1
    g.sampling.repetition_penalty = float(number(body, "repetition_penalty", 1.0, 0, 10, true));
    const json& seed = field(body, "seed");
    if (!seed.is_null()) {
      if (!seed.is_number_integer()) reject(400, "'seed' must be an integer", "seed");
      g.sampling.seed = seed.is_number_unsigned() ? seed.get<uint64_t>() : uint64_t(seed.get<int64_t>());
    } else {
      g.sampling.seed = std::random_device{}();
    }
    const json& stop = field(body, "stop");
    if (stop.is_string()) {
      g.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      if (stop.size() > 4) reject(400, "'stop' takes at most 4 strings", "stop");
      for (const auto& s : stop) {
        if (!s.is_string()) reject(400, "'stop' must be a string or an array of strings", "stop");
        g.stop.push_back(s.get<std::string>());
      }
    } else if (!stop.is_null()) {
      reject(400, "'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& s : g.stop)
      if (s.empty()) reject(400, "'stop' strings must not be empty", "stop");
    const json& ie = field(body, "ignore_eos");
    g.ignore_eos = ie.is_boolean() && ie.get<bool>();

    if (chat) {
      if (!chat_template) reject(400, "the model has no chat template (tokenizer_config.json); use /v1/completions");
      const json& msgs = field(body, "messages");
      if (!msgs.is_array() || msgs.empty()) reject(400, "'messages' must be a non-empty array", "messages");
      std::vector<chat::ChatMessage> list;
      for (const auto& m : msgs) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          reject(400, "each message needs a string 'role'", "messages");
        std::string content;
        const json& c = m.contains("content") ? m["content"] : json(nullptr);
        if (c.is_string()) {
          content = c.get<std::string>();
        } else if (c.is_array()) {  // content parts: text only
          for (const auto& part : c) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
              reject(400, "message content parts must be {\"type\": \"text\", \"text\": ...}", "messages");
            content += part["text"].get<std::string>();
          }
        } else if (!c.is_null()) {
          reject(400, "message 'content' must be a string or an array of text parts", "messages");
        }
        list.push_back({m["role"].get<std::string>(), content});
      }
      chat::ChatTemplateOptions co;
      co.add_generation_prompt = true;
      co.bos_token = tok->bos_token();
      co.eos_token = tok->eos_token();
      std::string text;
      try {
        std::lock_guard<std::mutex> lk(template_mu);
        text = chat_template->render(list, co);
      } catch (const Error& e) {
        reject(400, std::string("the chat template rejected the messages: ") + e.what(), "messages");
      }
      g.prompt = tok->encode(text, false);
    } else {
      const json& p = field(body, "prompt");
      if (p.is_string()) {
        g.prompt = encode(p.get<std::string>());
      } else if (p.is_array() && !p.empty() && p.size() == 1 && p[0].is_string()) {
        g.prompt = encode(p[0].get<std::string>());
      } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        for (const auto& x : p) {
          if (!x.is_number_integer()) reject(400, "'prompt' must be a string or an array of token ids", "prompt");
          const int64_t id = x.get<int64_t>();
          if (id < 0 || id >= engine.model().info().vocab_size)
            reject(400, "'prompt': token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(engine.model().info().vocab_size) + ")",
                   "prompt");
          g.prompt.push_back(int32_t(id));
        }
      } else {
        reject(400, "'prompt' must be a string, an array of one string or an array of token ids (one prompt per request)",
               "prompt");
      }
    }
    if (g.prompt.empty()) reject(400, "the prompt encodes to no tokens", chat ? "messages" : "prompt");
    const int64_t ctx = engine.model().info().max_context, np = int64_t(g.prompt.size());
    if (np >= ctx)
      reject(400, "the prompt is " + std::to_string(np) + " tokens; the context holds " + std::to_string(ctx) +
                      " (prompt plus at least one generated token)",
             chat ? "messages" : "prompt", "context_length_exceeded");
    const json& mt = field(body, chat && !field(body, "max_completion_tokens").is_null() ? "max_completion_tokens" : "max_tokens");
    if (mt.is_null()) {
      g.max_tokens = chat ? std::min(ctx - np, opts.max_tokens_limit) : std::min<int64_t>(16, ctx - np);
    } else {
      if (!mt.is_number_integer() || mt.get<int64_t>() < 1)
        reject(400, "'max_tokens' must be a positive integer, got " + mt.dump(-1, ' ', false, json::error_handler_t::replace), "max_tokens");
      g.max_tokens = mt.get<int64_t>();
      if (g.max_tokens > opts.max_tokens_limit)
        reject(400, "'max_tokens' is " + std::to_string(g.max_tokens) + "; this server allows at most " +
                        std::to_string(opts.max_tokens_limit),
               "max_tokens");
      if (np + g.max_tokens > ctx)
        reject(400, "the prompt (" + std::to_string(np) + " tokens) plus max_tokens (" + std::to_string(g.max_tokens) +
                        ") exceeds the context of " + std::to_string(ctx) + " tokens",
               "max_tokens", "context_length_exceeded");
    }
    return g;
  }

  std::vector<int32_t> encode(const std::string& text) {
    try {
      return tok->encode(text, true);
    } catch (const Error& e) {
      reject(400, std::string("'prompt': ") + e.what(), "prompt");
    }
  }

  // ---------------------------------------------------------------- generation
  struct Live {
    std::shared_ptr<Channel> ch;
    uint64_t engine_id = 0;
    std::string id;
  };

  Live start(const GenRequest& g) {
    if (stopping) reject(503, "the server is shutting down", "", "server_shutting_down");
    const EngineStats st = engine.stats();
    if (st.running + st.waiting >= opts.max_pending)
      reject(503, "the server is at capacity (" + std::to_string(opts.max_pending) + " requests); retry later", "",
             "server_overloaded");
    Live l;
    l.ch = std::make_shared<Channel>();
    Request r;
    r.prompt = g.prompt;
    r.max_tokens = g.max_tokens;
    r.sampling = g.sampling;
    r.stop_at_eos = !g.ignore_eos;
    if (!g.ignore_eos) r.stop_ids = stop_ids;
    // The callbacks own the channel too: it lives until the engine is done with the request, which a handler whose
    // client left ends by cancel() (so the request finishes as "cancelled" and its blocks are freed).
    std::shared_ptr<Channel> ch = l.ch;
    r.on_token = [ch](int32_t t) {
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        ch->tokens.push_back(t);
      }
      ch->cv.notify_all();
      return true;
    };
    r.on_done = [ch](const RequestResult& res) {
      {
        std::lock_guard<std::mutex> lk(ch->mu);
        ch->done = true;
        ch->result = res;
      }
      ch->cv.notify_all();
    };
    try {
      l.engine_id = engine.submit(std::move(r));
    } catch (const Error& e) {
      reject(e.status() == Status::invalid_argument ? 400 : 503, e.what());
    }
    l.id = (g.chat ? "chatcmpl-" : "cmpl-") + std::to_string(created) + "-" + std::to_string(next_id++);
    return l;
  }

  // Waits (at most `wait`) for tokens; returns the new ones and whether the request is done.
  static bool take(Channel& ch, std::vector<int32_t>& out, RequestResult& res, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lk(ch.mu);
    ch.cv.wait_for(lk, wait, [&] { return !ch.tokens.empty() || ch.done; });
    out.swap(ch.tokens);
    ch.tokens.clear();
    if (ch.done) res = ch.result;
    return ch.done;
  }

  json usage(const GenRequest& g, const RequestResult& r, int64_t completion) const {
    const int64_t prompt = int64_t(g.prompt.size());
    json u = {{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
    // An extension object, only when the server speculates (flashkit serve --lookup N; docs/serving.md):
    // mean_accepted_length = tokens delivered per verification step.
    if (engine.options().spec_lookup > 0)
      u["speculative"] = {
          {"proposed", r.spec_proposed},
          {"accepted", r.spec_accepted},
          {"verify_steps", r.spec_steps},
          {"acceptance_rate", r.spec_proposed > 0 ? double(r.spec_accepted) / double(r.spec_proposed) : 0.0},
          {"mean_accepted_length", r.spec_steps > 0 ? double(r.spec_emitted) / double(r.spec_steps) : 0.0}};
    return u;
  }

  json choice(const GenRequest& g, const std::string& text, const json& finish, const std::vector<int32_t>* ids,
              bool delta, bool first) const {
    json c = {{"index", 0}, {"finish_reason", finish}};
    if (g.chat) {
      if (delta) {
        json d = json::object();
        if (first) d["role"] = "assistant";
        if (!text.empty()) d["content"] = text;
        c["delta"] = d;
      } else {
        c["message"] = {{"role", "assistant"}, {"content", text}};
      }
    } else {
      c["text"] = text;
      c["logprobs"] = nullptr;
    }
    if (ids) c["token_ids"] = *ids;
    return c;
  }

  json envelope(const GenRequest& g, const Live& l, bool chunk) const {
    return {{"id", l.id},
            {"object", g.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", created},
            {"model", opts.model_id}};
  }

  static std::string finish_of(const RequestResult& r, const TextState& ts) {
    if (!ts.finish.empty()) return ts.finish;
    return r.finish_reason == "length" ? "length" : "stop";
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool chat) {
    // Counted in flight from the start, so that a graceful stop (which waits for in_flight == 0) cannot slip in
    // between the "stopping" check in start() and the response; a streamed response hands its count to the releaser.
    in_flight++;
    struct Done {
      Impl* self;
      bool owned = true;
      ~Done() {
        if (owned) self->in_flight--;
      }
    } done{this};
    const GenRequest g = parse(req, chat);
    Live l = start(g);
    if (!g.stream) {
      const int fd = connection_fd(req);
      TextState ts(*tok, g.stop, eos_stops(g));
      std::string text;
      RequestResult r;
      std::vector<int32_t> got;
      bool finished = false, cancelled = false;
      while (!finished) {
        finished = take(*l.ch, got, r, std::chrono::milliseconds(50));
        for (int32_t id : got)
          if (ts.finish.empty()) text += ts.push(id);
        if (!ts.finish.empty() && !finished && !cancelled) {
          engine.cancel(l.engine_id);  // a stop string or id matched: the rest is not wanted
          cancelled = true;
        }
        if (!finished && peer_gone(fd)) {
          engine.cancel(l.engine_id);
          disconnects++;
          return;  // nobody to answer
        }
      }
      if (r.finish_reason == "error") reject(500, "generation failed: " + r.error);
      if (ts.finish.empty()) text += ts.end();
      json out = envelope(g, l, false);
      out["choices"] = json::array({choice(g, text, finish_of(r, ts), g.return_ids ? &ts.ids : nullptr, false, false)});
      out["usage"] = usage(g, r, int64_t(ts.ids.size()));
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    // Streaming: server-sent events from a chunked content provider, on this connection's thread.
    struct StreamState {
      Impl* self;
      GenRequest g;
      Live l;
      TextState ts;
      int fd = -1;
      bool first = true, ended = false, finished = false, cancelled = false;
      RequestResult r;
      StreamState(Impl* s, GenRequest gg, Live ll, const Tokenizer& tok, const std::vector<int32_t>& stops)
          : self(s), g(std::move(gg)), l(std::move(ll)), ts(tok, g.stop, stops) {}
    };
    auto st = std::make_shared<StreamState>(this, g, l, *tok, eos_stops(g));
    done.owned = false;  // the releaser below decrements in_flight
    st->fd = connection_fd(req);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          Impl& s = *st->self;
          auto send = [&](const json& j) {
            const std::string ev = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
            return sink.write(ev.data(), ev.size());
          };
          if (st->first && st->g.chat) {  // the role first, as OpenAI does
            json j = s.envelope(st->g, st->l, true);
            j["choices"] = json::array({s.choice(st->g, "", nullptr, nullptr, true, true)});
            st->first = false;
            if (!send(j)) return false;
          }
          std::vector<int32_t> got;
          st->finished = take(*st->l.ch, got, st->r, std::chrono::milliseconds(50));
          std::string text;
          std::vector<int32_t> ids;
          for (int32_t id : got)
            if (st->ts.finish.empty()) {
              text += st->ts.push(id);
              ids.push_back(id);
            }
          if (!st->ts.finish.empty() && !st->finished && !st->cancelled) {
            s.engine.cancel(st->l.engine_id);
            st->cancelled = true;
          }
          const bool over = st->finished || !st->ts.finish.empty();
          if (over && st->r.finish_reason == "error") {
            json e = error_body({500, "generation failed: " + st->r.error, "server_error", "", ""});
            send(e);
            sink.write("data: [DONE]\n\n", 14);
            sink.done();
            return true;
          }
          if (over && st->ts.finish.empty()) text += st->ts.end();
          if (!text.empty() || (!ids.empty() && st->g.return_ids)) {
            json j = s.envelope(st->g, st->l, true);
            j["choices"] = json::array({s.choice(st->g, text, nullptr, st->g.return_ids ? &ids : nullptr, true,
                                                 st->first && st->g.chat)});
            st->first = false;
            if (!send(j)) return false;
          }
          if (over) {
            json j = s.envelope(st->g, st->l, true);
            j["choices"] = json::array({s.choice(st->g, "", s.finish_of(st->r, st->ts), nullptr, true, false)});
            if (!send(j)) return false;
            if (st->g.include_usage) {
              json u = s.envelope(st->g, st->l, true);
              u["choices"] = json::array();
              u["usage"] = s.usage(st->g, st->r, int64_t(st->ts.ids.size()));
              if (!send(u)) return false;
            }
            sink.write("data: [DONE]\n\n", 14);
            st->ended = true;
            sink.done();
            return true;
          }
          if (peer_gone(st->fd)) return false;  // the client left: end the response (the releaser cancels)
          return true;
        },
        [st](bool) {
          Impl& s = *st->self;
          if (!st->ended) {
            s.engine.cancel(st->l.engine_id);
            s.disconnects++;
          }
          s.in_flight--;
        });
  }

  // ---------------------------------------------------------------- routes
  template <typename F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      http_requests++;
      try {
        f(req, res);
      } catch (const HttpError& e) {
        http_errors++;
        send_error(res, e);
      } catch (const Error& e) {
        http_errors++;
        send_error(res, {e.status() == Status::invalid_argument ? 400 : 500, e.what(),
                         e.status() == Status::invalid_argument ? "invalid_request_error" : "server_error", "", ""});
      } catch (const std::exception& e) {
        http_errors++;
        send_error(res, {500, std::string("internal error: ") + e.what(), "server_error", "", ""});
      }
    };
  }

  std::string metrics() {
    const EngineStats s = engine.stats();
    double prompt_rate = 0, gen_rate = 0;
    {
      std::lock_guard<std::mutex> lk(rate_mu);
      if (samples.size() >= 2) {
        const double dt = std::chrono::duration<double>(samples.back().t - samples.front().t).count();
        if (dt > 0) {
          prompt_rate = double(samples.back().prompt - samples.front().prompt) / dt;
          gen_rate = double(samples.back().gen - samples.front().gen) / dt;
        }
      }
    }
    const int64_t lookups = s.prefix_hit_blocks + s.prefix_miss_blocks;
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      char num[40];
      if (v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(num, sizeof num, "%lld", (long long)v);
      else std::snprintf(num, sizeof num, "%.9g", v);
      o << "# HELP flashkit_" << name << " " << help << "\n# TYPE flashkit_" << name << " " << type << "\nflashkit_"
        << name << " " << num << "\n";
    };
    metric("requests_running", "gauge", "Requests in the decode batch.", double(s.running));
    metric("requests_waiting", "gauge", "Requests queued for admission (incl. preempted ones).", double(s.waiting));
    metric("http_requests_in_flight", "gauge", "Generation requests with an open HTTP response.", double(in_flight.load()));
    metric("kv_blocks_total", "gauge", "KV cache blocks in the pool.", double(s.kv_blocks_total));
    metric("kv_blocks_used", "gauge", "KV blocks referenced by sequences.", double(s.kv_blocks_used));
    metric("kv_blocks_free", "gauge", "KV blocks free or evictable (cached, unreferenced).", double(s.kv_blocks_free));
    metric("kv_blocks_cached", "gauge", "KV blocks in the prefix cache.", double(s.kv_blocks_cached));
    metric("kv_block_size", "gauge", "Positions per KV block.", double(s.block_size));
    metric("kv_cache_bytes", "gauge", "Bytes of the KV block pool.", double(s.kv_bytes));
    // Models without a KV cache (Mamba) run one session per sequence: no blocks, no prefix cache (docs/serving.md).
    metric("kv_cache_paged", "gauge", "1: paged KV blocks; 0: a model without a KV cache, one session per sequence.",
           engine.options().kv_memory > 0 ? 1.0 : 0.0);
    // CPU offload of weights (docs/serving.md): layers streamed from pinned host memory every step, and those bytes.
    metric("offloaded_layers", "gauge", "Decoder layers whose weights stream from pinned host memory.",
           double(engine.model().info().offloaded_layers));
    metric("offload_host_pinned_bytes", "gauge", "Pinned host bytes of the offloaded layers' weights.",
           double(engine.model().info().host_pinned_bytes));
    metric("prefix_caching_enabled", "gauge", "1 when prefix caching is on (always off without a KV cache).",
           engine.options().prefix_caching ? 1.0 : 0.0);
    metric("prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.", double(s.prefix_hit_blocks));
    metric("prefix_cache_misses_total", "counter", "Prompt blocks looked up and not found.", double(s.prefix_miss_blocks));
    metric("prefix_cache_hit_rate", "gauge", "Hits / lookups of prompt blocks since start.",
           lookups ? double(s.prefix_hit_blocks) / double(lookups) : 0.0);
    metric("prefix_cache_evictions_total", "counter", "Cached blocks evicted for reuse.", double(s.prefix_evictions));
    metric("prefix_cache_resets_total", "counter", "Prefix cache resets.", double(s.prefix_resets));
    metric("prompt_tokens_total", "counter", "Prompt tokens computed (cache hits excluded).", double(s.prompt_tokens));
    metric("generation_tokens_total", "counter", "Tokens generated.", double(s.generation_tokens));
    metric("prompt_tokens_per_second", "gauge", "Prompt tokens computed per second, last 10 s.", prompt_rate);
    metric("generation_tokens_per_second", "gauge", "Tokens generated per second, last 10 s.", gen_rate);
    metric("preemptions_total", "counter", "Sequences preempted (recomputed later).", double(s.preemptions));
    metric("requests_finished_total", "counter", "Requests finished.", double(s.requests_finished));
    metric("requests_cancelled_total", "counter", "Requests cancelled (client gone, stop string).", double(s.requests_cancelled));
    metric("client_disconnects_total", "counter", "Clients that left before their response was complete.", double(disconnects.load()));
    metric("http_requests_total", "counter", "HTTP requests handled.", double(http_requests.load()));
    metric("http_errors_total", "counter", "HTTP requests answered with an error.", double(http_errors.load()));
    metric("engine_steps_total", "counter", "Batched model steps.", double(s.steps));
    metric("engine_busy_seconds_total", "counter", "Seconds spent in model steps.", s.busy_s);
    // n-gram speculative decoding (flashkit serve --lookup N; all 0 without it).
    metric("spec_enabled", "gauge", "1 when the server speculates (n-gram lookup).",
           engine.options().spec_lookup > 0 ? 1.0 : 0.0);
    metric("spec_verify_steps_total", "counter", "Sequence steps that verified n-gram proposals.", double(s.spec_steps));
    metric("spec_proposed_tokens_total", "counter", "Tokens proposed by n-gram lookup.", double(s.spec_proposed));
    metric("spec_accepted_tokens_total", "counter", "Proposed tokens accepted.", double(s.spec_accepted));
    metric("spec_acceptance_rate", "gauge", "Accepted / proposed tokens since start.",
           s.spec_proposed > 0 ? double(s.spec_accepted) / double(s.spec_proposed) : 0.0);
    return o.str();
  }

  void routes() {
    svr.new_task_queue = [this] { return new httplib::ThreadPool(size_t(std::max(1, opts.max_connections))); };
    svr.set_payload_max_length(opts.max_body_bytes);
    svr.set_keep_alive_timeout(opts.keep_alive_s);
    svr.set_read_timeout(10);
    svr.set_write_timeout(10);
    svr.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      http_errors++;
      if (res.status == 413)
        send_error(res, {413, "the request body exceeds the limit of " + std::to_string(opts.max_body_bytes) + " bytes",
                         "invalid_request_error", "", "request_too_large"});
      else if (res.status == 404)
        send_error(res, {404, "no such endpoint", "not_found_error", "", ""});
      else
        send_error(res, {res.status, "HTTP error " + std::to_string(res.status),
                         res.status >= 500 ? "server_error" : "invalid_request_error", "", ""});
    });
    svr.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
      if (stopping) reject(503, "shutting down", "", "server_shutting_down");
      res.set_content(R"({"status":"ok"})", "application/json");
    }));
    svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
      const json m = {{"id", opts.model_id},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "flashkit"},
                      {"max_model_len", engine.model().info().max_context}};
      res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    }));
    svr.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    }));
    svr.Post("/v1/cache/reset", guarded([this](const httplib::Request&, httplib::Response& res) {
      engine.reset_prefix_cache();
      res.set_content(R"({"status":"ok"})", "application/json");
    }));
    svr.Post("/v1/completions",
             guarded([this](const httplib::Request& req, httplib::Response& res) { complete(req, res, false); }));
    svr.Post("/v1/chat/completions",
             guarded([this](const httplib::Request& req, httplib::Response& res) { complete(req, res, true); }));
  }

  // Once a second: a counter sample for the /metrics rates. Every 50 ms: a requested stop proceeds once the requests
  // in flight are done (cpp-httplib's stop() would cut streamed responses short).
  void tick() {
    while (!ticker_stop) {
      const EngineStats s = engine.stats();
      {
        std::lock_guard<std::mutex> lk(rate_mu);
        samples.push_back({Clock::now(), s.prompt_tokens, s.generation_tokens});
        while (samples.size() > 11) samples.pop_front();
      }
      for (int i = 0; i < 20 && !ticker_stop; ++i) {
        if (stopping && in_flight == 0) {
          svr.stop();
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }
};

HttpServer::HttpServer(Engine& engine, std::shared_ptr<const Tokenizer> tokenizer, const ServerOptions& opts)
    : impl_(std::make_unique<Impl>(engine, std::move(tokenizer), opts)) {}

HttpServer::~HttpServer() {
  stop();
  impl_->ticker_stop = true;
  if (impl_->ticker.joinable()) impl_->ticker.join();
}

int HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.opts.port;
  if (port == 0) {
    port = s.svr.bind_to_any_port(s.opts.host);
    if (port < 0) fail(Status::invalid_argument, "serve: cannot bind " + s.opts.host + " (any port)");
  } else if (!s.svr.bind_to_port(s.opts.host, port)) {
    fail(Status::invalid_argument, "serve: cannot bind " + s.opts.host + ":" + std::to_string(port) + ": " +
                                       std::strerror(errno) + " (port in use, or not a local address?)");
  }
  s.opts.port = port;
  raise_listen_backlog(port, 1024);
  return port;
}

void HttpServer::run() {
  Impl& s = *impl_;
  s.ticker = std::thread([&s] { s.tick(); });
  s.svr.listen_after_bind();
  // listen_after_bind returns once stop() closed the socket and the connection threads have finished.
  s.ticker_stop = true;
  if (s.ticker.joinable()) s.ticker.join();
}

void HttpServer::stop() {
  // New generation requests get 503 from now on; run()'s ticker closes the listener once the ones in flight are done.
  impl_->stopping = true;
}

bool HttpServer::stopping() const { return impl_->stopping; }

}  // namespace flashkit::serve
