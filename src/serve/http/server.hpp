// The OpenAI-compatible HTTP front end of serve::Engine (`flashkit serve`; docs/serving.md), on Debian's cpp-httplib.
//
//   POST /v1/completions        prompt: text or token ids; stream: server-sent events
//   POST /v1/chat/completions   messages rendered with the model's chat template; stream: server-sent events
//   GET  /v1/models, GET /health, GET /metrics (Prometheus text), POST /v1/cache/reset (empties the prefix cache)
// Errors are JSON in OpenAI's shape {"error": {"message", "type", "param", "code"}} with a 4xx status for the
// client's mistakes (malformed JSON, a bad field, a body over the limit, a prompt over the context, an unknown model)
// and 503 when the server is full or stopping. A client that disconnects cancels its request (its KV blocks are freed
// at the next step). stop() stops accepting connections and returns from run() once the requests in flight are done.
// Built as a static library for the CLI (src/serve/http/CMakeLists.txt): libflashkit.so stays free of cpp-httplib.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "flashkit/serve.hpp"
#include "flashkit/tokenizer.hpp"

namespace flashkit::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port (bind() returns it)
  std::string model_id;                 // the name /v1/models reports and requests must use (or omit)
  size_t max_body_bytes = 1 << 20;      // request bodies above: 413
  int64_t max_tokens_limit = 4096;      // max_tokens above: 400
  int max_connections = 64;             // connections served at once (HTTP threads); more wait to be accepted
  int64_t max_pending = 256;            // requests queued or running in the engine; more: 503
  int keep_alive_s = 2;
};

class HttpServer {
 public:
  // The tokenizer encodes text prompts, decodes the output and provides the chat template and eos ids.
  HttpServer(Engine& engine, std::shared_ptr<const Tokenizer> tokenizer, const ServerOptions& opts);
  ~HttpServer();
  int bind();      // binds host:port (throws flashkit::Error when it cannot); returns the port
  void run();      // serves until stop(); returns when the requests in flight have finished
  void stop();     // thread-safe; also safe before run()
  bool stopping() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashkit::serve
