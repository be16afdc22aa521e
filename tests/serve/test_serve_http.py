"""`flashkit serve` over HTTP: the OpenAI-style API, its errors, and reliability under misbehaving clients.

Runs the real binary (FLASHKIT_CLI) on the tiny Llama fixture with a byte-level tokenizer and a Llama 3 chat template,
on a free loopback port, with Python's http.client / urllib only.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

CLI = os.environ.get("FLASHKIT_CLI", "build/bin/flashkit")
DATA = os.environ.get("FLASHKIT_TEST_DATA", os.path.join(os.path.dirname(__file__), "..", "data"))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-llama-chat")
    src = os.path.join(DATA, "models", "tiny-llama")
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), d / f)
    shutil.copy(os.path.join(DATA, "tokenizers", "tiny_bytelevel", "tokenizer.json"), d / "tokenizer.json")
    with open(os.path.join(DATA, "chat", "llama3.jinja")) as f:
        tmpl = f.read()
    (d / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": tmpl, "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}))
    return str(d)


class Server:
    def __init__(self, model_dir, *extra):
        self.proc = subprocess.Popen([CLI, "serve", "-m", model_dir, "--port", "0", "--threads", "1", "--ctx", "4096",
                                      "--model-id", "tiny", *extra],
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            if "listening on http://127.0.0.1:" in line:
                self.port = int(line.split("127.0.0.1:")[1].split()[0])
                break
        assert self.port, "server did not start: " + "".join(self.log)
        # Keep draining stderr so the server never blocks on a full pipe.
        self.drain = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self.drain.start()

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, raw=None, headers=None):
        c = self.conn()
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, payload

    def post(self, path, body):
        status, payload = self.request("POST", path, body)
        return status, json.loads(payload)

    def metrics(self):
        status, payload = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in payload.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k[len("flashkit_"):]] = float(v)
        return out

    def wait_idle(self, timeout=20):
        deadline = time.time() + timeout
        m = self.metrics()
        while time.time() < deadline:
            m = self.metrics()
            if m["requests_running"] == 0 and m["requests_waiting"] == 0 and m["kv_blocks_used"] == 0 \
                    and m["http_requests_in_flight"] == 0:
                return m
            time.sleep(0.05)
        raise AssertionError(f"server not idle: {m}")

    def wait_for(self, key, above, timeout=20):
        """Waits until metric `key` exceeds `above` (the server acts on a vanished client at its next poll)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.metrics()[key] > above:
                return
            time.sleep(0.05)
        raise AssertionError(f"{key} stayed at {above}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir, "--max-connections", "32")
    yield s
    assert s.stop() == 0, "".join(s.log)


def sse_events(resp):
    """Yields the JSON of each `data:` event of a streamed response until [DONE]."""
    buf = b""
    while True:
        chunk = resp.read1(4096) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            assert ev.startswith(b"data: "), ev
            data = ev[6:]
            if data == b"[DONE]":
                yield "[DONE]"
                return
            yield json.loads(data)


# ---------------------------------------------------------------- the API

def test_models_health(server):
    status, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = server.request("GET", "/v1/models")
    m = json.loads(body)
    assert status == 200 and m["object"] == "list" and m["data"][0]["id"] == "tiny"


def test_greedy_completion_matches_generate(server, model_dir):
    prompt = [1, 17, 42, 99, 250, 3, 77, 310, 128, 64, 5, 200]
    status, body = server.post("/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 20,
                                                   "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    assert status == 200, body
    ch = body["choices"][0]
    assert ch["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 20, "total_tokens": len(prompt) + 20,
                             "prompt_tokens_details": {"cached_tokens": body["usage"]["prompt_tokens_details"]["cached_tokens"]}}
    out = subprocess.run([CLI, "generate", "-m", model_dir, "--prompt-ids", ",".join(map(str, prompt)), "--ids",
                          "--temp", "0", "-n", "20", "--ignore-eos", "-q", "--threads", "1"],
                         capture_output=True, text=True, check=True)
    assert ch["token_ids"] == [int(x) for x in out.stdout.split()]


def test_text_prompt_and_stop_string(server):
    status, body = server.post("/v1/completions", {"prompt": "Hello world", "max_tokens": 12, "temperature": 0,
                                                   "ignore_eos": True})
    assert status == 200, body
    text = body["choices"][0]["text"]
    assert body["object"] == "text_completion"
    if len(text) >= 3:  # stop at a string taken from the middle of the greedy output: cut before it, reason "stop"
        stop = text[1:3]
        status, b2 = server.post("/v1/completions", {"prompt": "Hello world", "max_tokens": 12, "temperature": 0,
                                                     "ignore_eos": True, "stop": [stop]})
        assert status == 200
        assert b2["choices"][0]["finish_reason"] == "stop"
        assert b2["choices"][0]["text"] == text[:text.index(stop)]


def test_chat_stream_equals_non_stream(server):
    req = {"model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
           "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    status, body = server.post("/v1/chat/completions", req)
    assert status == 200, body
    assert body["object"] == "chat.completion"
    full = body["choices"][0]["message"]["content"]
    c = server.conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps({**req, "stream": True,
                                                                "stream_options": {"include_usage": True}}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    events = list(sse_events(r))
    c.close()
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in chunks if e["choices"])
    assert text == full
    finishes = [e["choices"][0]["finish_reason"] for e in chunks if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finishes == ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == 10
    # The second request's prompt was the first one's: its full blocks came from the prefix cache.
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_sampling_is_reproducible_with_a_seed(server):
    req = {"prompt": [5, 6, 7, 8], "max_tokens": 12, "temperature": 0.9, "top_p": 0.9, "seed": 1234, "ignore_eos": True,
           "return_token_ids": True}
    a = server.post("/v1/completions", req)[1]["choices"][0]["token_ids"]
    b = server.post("/v1/completions", req)[1]["choices"][0]["token_ids"]
    assert a == b


# ---------------------------------------------------------------- errors

def error_of(status, body, want_status, want_param=None):
    assert status == want_status, body
    err = body["error"] if isinstance(body, dict) else json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if want_param:
        assert err["param"] == want_param, err
    return err


@pytest.mark.parametrize("raw", [b"{", b"[1,2", b"not json", b"\xff\xfe", b"", b"[]", b"null"])
def test_malformed_json(server, raw):
    status, body = server.request("POST", "/v1/completions", raw=raw)
    error_of(status, json.loads(body), 400)


@pytest.mark.parametrize("req,param", [
    ({}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": {"a": 1}}, "prompt"),
    ({"prompt": [1, 100000]}, "prompt"),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 100000}, "max_tokens"),
    ({"prompt": "hi", "temperature": -1}, "temperature"),
    ({"prompt": "hi", "temperature": "hot"}, "temperature"),
    ({"prompt": "hi", "top_p": 0}, "top_p"),
    ({"prompt": "hi", "n": 2}, "n"),
    ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": "hi", "stop": [1]}, "stop"),
    ({"prompt": "hi", "stream": "yes"}, "stream"),
    ({"prompt": "hi", "logprobs": 3}, "logprobs"),
    ({"prompt": "hi", "seed": 1.5}, "seed"),
])
def test_bad_fields(server, req, param):
    status, body = server.post("/v1/completions", req)
    error_of(status, body, 400, param)


def test_bad_chat_and_model(server):
    error_of(*server.post("/v1/chat/completions", {"messages": []}), 400, "messages")
    error_of(*server.post("/v1/chat/completions", {"messages": [{"content": "x"}]}), 400, "messages")
    error_of(*server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}), 400, "messages")
    err = error_of(*server.post("/v1/completions", {"model": "gpt-4", "prompt": "hi"}), 404, "model")
    assert err["code"] == "model_not_found"


def test_context_and_body_limits(server):
    err = error_of(*server.post("/v1/completions", {"prompt": [3] * 4100}), 400, "prompt")
    assert err["code"] == "context_length_exceeded"
    err = error_of(*server.post("/v1/completions", {"prompt": [3] * 4000, "max_tokens": 100}), 400, "max_tokens")
    assert err["code"] == "context_length_exceeded"
    big = b'{"prompt": "' + b"a" * (2 << 20) + b'"}'
    status, body = server.request("POST", "/v1/completions", raw=big)
    error_of(status, json.loads(body), 413)
    status, body = server.request("GET", "/v1/nothing")
    error_of(status, json.loads(body), 404)
    server.wait_idle()


# ---------------------------------------------------------------- reliability

def open_raw(server, body):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def test_client_vanishes_mid_stream(server):
    before = server.metrics()
    s = open_raw(server, {"prompt": [1, 2, 3], "max_tokens": 4000, "temperature": 0, "ignore_eos": True, "stream": True})
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    s.close()  # mid-stream
    server.wait_for("requests_cancelled_total", before["requests_cancelled_total"])
    after = server.wait_idle()
    assert after["requests_cancelled_total"] >= before["requests_cancelled_total"] + 1
    assert after["client_disconnects_total"] >= before["client_disconnects_total"] + 1
    assert after["generation_tokens_total"] - before["generation_tokens_total"] < 4000


def test_client_vanishes_before_a_non_streamed_answer(server):
    before = server.metrics()
    s = open_raw(server, {"prompt": [1, 2, 3], "max_tokens": 4000, "temperature": 0, "ignore_eos": True})
    time.sleep(0.05)
    s.close()
    server.wait_for("requests_cancelled_total", before["requests_cancelled_total"])
    after = server.wait_idle()
    assert after["requests_cancelled_total"] >= before["requests_cancelled_total"] + 1
    assert after["generation_tokens_total"] - before["generation_tokens_total"] < 4000


def test_many_connections_at_once(server):
    n = 200
    results = [None] * n

    def one(i):
        try:
            c = server.conn(timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps({"prompt": [1 + i % 50, 2, 3], "max_tokens": 4,
                                                                  "temperature": 0, "ignore_eos": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            results[i] = (r.status, json.loads(r.read()))
            c.close()
        except Exception as e:  # noqa: BLE001 - recorded and asserted below
            results[i] = ("exception", repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    ok = 0
    for st, body in results:
        assert st != "exception", body
        if st == 200:
            assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 4
            ok += 1
        else:  # a clear refusal, in OpenAI's shape
            error_of(st, body, 503)
    assert ok > 0
    m = server.wait_idle()
    assert m["kv_blocks_free"] == m["kv_blocks_total"]
    assert server.request("GET", "/health")[0] == 200


def test_metrics_count_prefix_hits_and_reset(server):
    prompt = list(range(10, 10 + 70))  # four full blocks of 16, then six tokens
    req = {"prompt": prompt, "max_tokens": 2, "temperature": 0, "ignore_eos": True}
    server.post("/v1/completions", req)
    m0 = server.metrics()
    _, body = server.post("/v1/completions", req)
    m1 = server.metrics()
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 64
    assert m1["prefix_cache_hits_total"] - m0["prefix_cache_hits_total"] == 4
    assert 0 < m1["prefix_cache_hit_rate"] <= 1
    status, _ = server.request("POST", "/v1/cache/reset", raw=b"")
    assert status == 200
    _, body = server.post("/v1/completions", req)
    m2 = server.metrics()
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # never a stale hit after a reset
    assert m2["prefix_cache_resets_total"] == m1["prefix_cache_resets_total"] + 1
    assert m2["prefix_cache_hits_total"] == m1["prefix_cache_hits_total"]
    assert m2["prefix_cache_misses_total"] - m1["prefix_cache_misses_total"] == 4
    for k in ("requests_running", "requests_waiting", "kv_blocks_used", "kv_blocks_free", "prompt_tokens_per_second",
              "generation_tokens_per_second"):
        assert k in m2
    assert m2["offloaded_layers"] == 0 and m2["offload_host_pinned_bytes"] == 0  # CPU: nothing offloaded


def test_sigterm_finishes_in_flight_requests_and_exits_0(model_dir):
    s = Server(model_dir)
    c = s.conn()
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": [4, 5, 6], "max_tokens": 120, "temperature": 0,
                                                           "ignore_eos": True, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    events = sse_events(r)
    first = next(events)
    assert "choices" in first
    s.proc.send_signal(signal.SIGTERM)
    rest = list(events)
    assert rest[-1] == "[DONE]"
    finishes = [e["choices"][0]["finish_reason"] for e in rest[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finishes == ["length"]  # completed, not cut off
    assert s.proc.wait(20) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2)


def test_max_pending_refuses_with_503(model_dir):
    s = Server(model_dir, "--max-pending", "1")
    try:
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": [4, 5, 6], "max_tokens": 3000, "temperature": 0,
                                                               "ignore_eos": True, "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        events = sse_events(r)
        next(events)  # the first request is running
        err = error_of(*s.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}), 503)
        assert err["code"] == "server_overloaded"
        c.close()  # leave: the first request is cancelled, and the server takes requests again
        s.wait_for("requests_cancelled_total", 0)
        s.wait_idle()
        assert s.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2})[0] == 200
    finally:
        assert s.stop() == 0


def test_multi_turn_chat_reuses_the_previous_turn(server):
    turn1 = [{"role": "user", "content": "tell me something"}]
    s1, b1 = server.post("/v1/chat/completions", {"messages": turn1, "max_tokens": 8, "temperature": 0})
    assert s1 == 200
    reply = b1["choices"][0]["message"]["content"]
    turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "and more?"}]
    s2, b2 = server.post("/v1/chat/completions", {"messages": turn2, "max_tokens": 4, "temperature": 0})
    assert s2 == 200
    # The second prompt starts with the first one: at least its full blocks (16 tokens each) come from the cache.
    assert b2["usage"]["prompt_tokens_details"]["cached_tokens"] >= b1["usage"]["prompt_tokens"] // 16 * 16 > 0


@pytest.mark.parametrize("args,msg", [
    (["serve", "-m", "{fixture}"], "tokenizer.json"),
    (["serve", "-m", "{model}", "--kv-memory", "12X"], "--kv-memory"),
    (["serve", "-m", "{model}", "--kv-memory", "100"], "holds no KV block"),
    (["serve", "-m", "{model}", "--port", "70000"], "--port"),
    (["serve", "-m", "{model}", "--max-running", "0"], "--max-running"),
    (["bench", "serve", "--url", "http://10.0.0.1:80"], "loopback"),
    (["bench", "serve", "-m", "{model}", "--concurrency", "0"], "--concurrency"),
    (["serve", "-m", "{model}", "--lookup", "-1"], "--lookup"),
    (["serve", "-m", "{model}", "--lookup", "65"], "--lookup"),
    (["serve", "-m", "{model}", "--lookup", "3", "--draft-tokens", "0"], "--draft-tokens"),
    (["serve", "-m", "{model}", "--lookup", "3", "--draft-tokens", "often"], "--draft-tokens"),
    (["serve", "-m", "{model}", "--draft-tokens", "4"], "needs --lookup"),
    (["serve", "-m", "{model}", "--lookup", "3", "--max-draft-tokens", "0"], "--max-draft-tokens"),
    (["serve", "-m", "{model}", "--lookup", "3", "--spec-max-batch", "-1"], "--spec-max-batch"),
    (["bench", "serve", "-m", "{model}", "--lookup", "3", "--draft-tokens", "99"], "--draft-tokens"),
])
def test_cli_errors_are_one_line_exit_2(model_dir, args, msg):
    fixture = os.path.join(DATA, "models", "tiny-llama")
    argv = [a.replace("{fixture}", fixture).replace("{model}", model_dir) for a in args]
    r = subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr and r.stderr.count("\n") == 1, r.stderr


# ---------------------------------------------------------------- n-gram speculative decoding (--lookup)

def test_speculative_server_matches_generate_and_reports_statistics(model_dir):
    s = Server(model_dir, "--lookup", "3", "--draft-tokens", "4")
    try:
        m0 = s.metrics()
        assert m0["spec_enabled"] == 1 and m0["spec_proposed_tokens_total"] == 0
        phrase = [17, 42, 99, 250, 3, 77]
        prompt = [1] + phrase * 3 + phrase[:2]
        status, body = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                  "ignore_eos": True, "return_token_ids": True})
        assert status == 200, body
        out = subprocess.run([CLI, "generate", "-m", model_dir, "--prompt-ids", ",".join(map(str, prompt)), "--ids",
                              "--temp", "0", "-n", "24", "--ignore-eos", "-q", "--threads", "1"],
                             capture_output=True, text=True, check=True)
        assert body["choices"][0]["token_ids"] == [int(x) for x in out.stdout.split()]
        sp = body["usage"]["speculative"]
        assert set(sp) == {"proposed", "accepted", "verify_steps", "acceptance_rate", "mean_accepted_length"}
        assert sp["proposed"] > 0 and 0 <= sp["accepted"] <= sp["proposed"] and sp["verify_steps"] > 0
        assert sp["acceptance_rate"] == pytest.approx(sp["accepted"] / sp["proposed"])
        assert 1 <= sp["mean_accepted_length"] <= 1 + sp["accepted"] / sp["verify_steps"] + 1e-9
        m1 = s.metrics()
        assert m1["spec_proposed_tokens_total"] == sp["proposed"]
        assert m1["spec_accepted_tokens_total"] == sp["accepted"]
        assert m1["spec_verify_steps_total"] == sp["verify_steps"]
        assert m1["spec_acceptance_rate"] == pytest.approx(sp["accepted"] / sp["proposed"])
        assert m1["kv_blocks_used"] == 0  # rolled back and released
        # Streamed with usage: the same tokens, and the statistics in the final usage chunk.
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({
            "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "stream": True, "stream_options": {"include_usage": True}}), headers={"Content-Type": "application/json"})
        events = [e for e in sse_events(c.getresponse()) if e != "[DONE]"]
        c.close()
        ids = [t for e in events if e["choices"] for t in e["choices"][0].get("token_ids", [])]
        assert ids == body["choices"][0]["token_ids"]
        assert events[-1]["usage"]["speculative"]["proposed"] > 0
        # Sampling works too (exactness of the rule is tested in C++: test_serve_spec.cpp).
        status, body = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 16, "temperature": 0.8,
                                                  "seed": 3, "ignore_eos": True})
        assert status == 200 and body["usage"]["completion_tokens"] == 16
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_server_without_lookup_reports_no_speculation(server):
    status, body = server.post("/v1/completions", {"prompt": [1, 2, 3, 1, 2, 3, 1, 2], "max_tokens": 8,
                                                   "temperature": 0, "ignore_eos": True})
    assert status == 200 and "speculative" not in body["usage"]
    m = server.metrics()
    assert m["spec_enabled"] == 0 and m["spec_proposed_tokens_total"] == 0
