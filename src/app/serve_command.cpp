// app/serve_command.cpp — `hindsight serve -m MODEL`: the OpenAI-compatible HTTP server.
//
// Order: bind and listen first (so /health answers 503 "Loading model" while the model
// loads), load the model, size the KV cache, build and start the Engine, then mark the
// server ready. SIGINT/SIGTERM: new requests and /health get 503 (draining), the requests in
// flight run to their end for up to --shutdown-timeout seconds, then the engine stops (what is
// left ends as cancelled, streams get an error event), the HTTP threads finish, exit 0. A
// signal while loading exits at once; a second signal during shutdown exits at once.
//
// Sizes: --max-model-len defaults to the model's training context; -c (KV capacity in
// tokens, across all sequences) defaults to max(2 x max-model-len, 16384); the engine caps
// max-model-len at the KV capacity.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "app/commands.h"
#include "app/loaded_model.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace hs::app {
namespace {

struct ServeOptions {
  ModelOptions model;
  server::ServerConfig http;
  EngineConfig engine;
  bool no_prefix_caching = false;
  bool ctx_given = false;  // -c was on the command line
  int state_checkpoints = -1;  // hybrid models: prefix-cache state checkpoints (-1: 2 x max_num_seqs)
  double shutdown_timeout_s = 30;  // draining after SIGTERM before what is left is cancelled
};

// Waits for SIGINT/SIGTERM on its own thread (the signals are blocked everywhere else).
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any other thread starts
    thread_ = std::thread([this] { run(); });
  }
  ~SignalWatcher() {
    quit_ = true;
    thread_.join();
  }
  void set_serving(bool on) { serving_ = on; }
  // Blocks until the first signal; returns its number.
  int wait() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  void run() {
    const timespec tick{0, 200'000'000};
    while (!quit_) {
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig <= 0) continue;
      if (!serving_) {  // loading, or a second signal while shutting down: leave now
        spdlog::warn("signal {}: exiting now", sig);
        std::_Exit(128 + sig);
      }
      spdlog::info("signal {}: shutting down (send it again to exit at once)", sig);
      serving_ = false;
      {
        std::lock_guard lk(mu_);
        signal_ = sig;
      }
      cv_.notify_all();
    }
  }

  sigset_t set_;
  std::thread thread_;
  std::atomic<bool> quit_{false}, serving_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
};

int run_serve(ServeOptions& o) {
  std::signal(SIGPIPE, SIG_IGN);  // writes to closed sockets must fail, not kill us
  SignalWatcher signals;
  if (o.http.served_model_name.empty())
    o.http.served_model_name = model_display_name(o.model);

  server::HttpServer http(o.http);
  if (Status s = http.start(); !s.is_ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }
  spdlog::info("listening on http://{}:{} (model '{}' loading)", o.http.host, http.port(), o.http.served_model_name);

  // Load the model; the KV capacity depends on its context length.
  auto device = parse_device(o.model.device);
  if (!device.is_ok()) {
    spdlog::error("{}", device.status().message());
    return 1;
  }
  auto models = load_models(o.model, *device);
  if (!models.is_ok()) {
    spdlog::error("{}", models.status().message());
    return 1;
  }
  LanguageModel& model = models->model();
  std::unique_ptr<gguf::File> vocab_file;  // --vocab's tokenizer (and chat template)
  auto tokenizer = make_model_tokenizer(o.model, model, &vocab_file);
  if (!tokenizer.is_ok()) {
    spdlog::error("tokenizer: {}", tokenizer.status().message());
    return 1;
  }
  const Tokenizer& tok = **tokenizer;
  const ModelConfig& mc = model.config();
  if (tok.n_vocab() < mc.n_vocab) {
    spdlog::error("tokenizer has {} tokens but the embedding has {} rows", tok.n_vocab(), mc.n_vocab);
    return 1;
  }
  auto dtype = parse_kv_dtype(o.model.kv_cache_dtype);
  if (!dtype.is_ok()) {
    spdlog::error("{}", dtype.status().message());
    return 1;
  }
  const int wanted_len = o.engine.max_model_len > 0 ? o.engine.max_model_len : mc.n_ctx_train;
  const int ctx = o.ctx_given ? o.model.ctx_size : std::max(wanted_len * 2, 16384);
  const KvGeometry g = model.kv_geometry(16, *dtype);
  const int32_t n_pages = (ctx + g.page_tokens - 1) / g.page_tokens;
  std::unique_ptr<KvCache> kv_owner = make_kv_cache(o.model, model, *dtype, n_pages);
  KvCache& kv = *kv_owner;
  if (Status st = apply_kv_tier(o.model, model); !st.is_ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  ThreadPool pool(o.model.threads);
  // Sparse attention for long contexts (--sparse; auto: when the sketch file exists) and its
  // device tier, with resident sinks + window for every running sequence. Declared after kv:
  // the tier is one of kv's lease listeners and dies first.
  // Hybrid models: a recurrent-state slot per running sequence and the prefix cache's state
  // checkpoints (kv/prefix_cache.h), declared after kv (the pool is another lease listener).
  std::unique_ptr<RecurrentPool> states;
  Result<std::unique_ptr<SparseRuntime>> sparse = std::unique_ptr<SparseRuntime>();
  std::unique_ptr<HotChunks> device_tier;
  if (models->hybrid) {
    const int32_t n_ckpt = o.no_prefix_caching ? 0
                           : o.state_checkpoints >= 0 ? o.state_checkpoints
                                                      : 2 * o.engine.max_num_seqs;
    auto pool_or = make_state_pool(*models->hybrid, kv, o.engine.max_num_seqs, n_ckpt);
    if (!pool_or.is_ok()) {
      spdlog::error("{}", pool_or.status().message());
      return 1;
    }
    states = std::move(*pool_or);
  }
  // Sparse attention on the KV layers (a hybrid model's full-attention layers).
  sparse = make_sparse_runtime(o.model, model, kv);
  if (!sparse.is_ok()) {
    spdlog::error("{}", sparse.status().message());
    return 1;
  }
  if (*sparse) {
    auto tier = make_device_tier(o.model, model, kv, (*sparse)->config(), o.engine.max_num_seqs);
    if (!tier.is_ok()) {
      spdlog::error("{}", tier.status().message());
      return 1;
    }
    device_tier = std::move(*tier);
    model.set_sparse(sparse->get());
    model.set_hot_chunks(device_tier.get());
  }
  std::string template_origin;
  auto tmpl = chat_template_for_model(vocab_file ? *vocab_file : model.file(), &template_origin);
  if (!tmpl.is_ok()) spdlog::warn("no chat template ({}); /v1/chat/completions will answer 400", tmpl.status().message());

  o.engine.max_model_len = wanted_len;
  o.engine.enable_prefix_caching = !o.no_prefix_caching;
  if (Status st = model.reserve(o.engine.max_num_batched_tokens); !st.is_ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  if (model.device() != Device::kCpu) {  // the scheduler's step costs in this device's rates
    if (auto peaks = model.backend().measure_peaks(); peaks.is_ok()) {
      o.engine.mem_bytes_per_s = peaks->memory_bytes_per_s;
      o.engine.matmul_flops_per_s = peaks->matmul_flops_per_s;
      spdlog::info("step-cost model: {:.0f} GB/s, {:.0f} TFLOP/s (measured now: {})", peaks->memory_bytes_per_s / 1e9,
                   peaks->matmul_flops_per_s / 1e12, peaks->how);
    } else {
      spdlog::warn("step-cost model: CPU rates ({})", peaks.status().message());
    }
  }
  Engine engine(model, tok, kv, pool, o.engine);
  engine.start();
  spdlog::info("model {} ({}); KV {} tokens in {} pages ({:.0f} MiB {}); max_model_len {}; max_num_seqs {}; "
               "max_num_batched_tokens {}; prefix caching {}; chat template: {}",
               model_display_name(o.model), describe(mc), static_cast<int64_t>(n_pages) * g.page_tokens, n_pages,
               static_cast<double>(n_pages) * g.page_bytes() * g.n_layer / (1 << 20), o.model.kv_cache_dtype,
               engine.max_model_len(), engine.config().max_num_seqs, engine.config().max_num_batched_tokens,
               engine.config().enable_prefix_caching ? (states ? "on (recurrent-state checkpoints)" : "on") : "off",
               tmpl.is_ok() ? template_origin : "none");

  http.set_ready(
      server::ServingModel{&engine, &tok, tmpl.is_ok() ? &*tmpl : nullptr, engine.max_model_len(), mc.n_vocab});
  signals.set_serving(true);
  spdlog::info("ready: http://{}:{}/v1 serving '{}'", o.http.host, http.port(), o.http.served_model_name);

  signals.wait();
  http.begin_shutdown();  // new requests and /health: 503
  // Drain: the API requests in flight (their handlers, which also covers a request between
  // parsing and the engine's queue) and the engine's open requests finish, up to the deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.shutdown_timeout_s);
  for (;;) {
    const EngineStats st = engine.stats();
    if (st.running + st.waiting == 0 && http.metrics().http_requests_active() == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::warn("shutdown: {} requests still open after {:.0f} s; cancelling them", st.running + st.waiting,
                   o.shutdown_timeout_s);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  engine.stop();          // open requests end (kCancelled)
  http.stop();            // HTTP threads finish their responses
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  add_model_options(cmd, o->model);
  server::ServerConfig& h = o->http;
  h.served_model_name.clear();  // default: the model file's stem
  cmd->add_option("--host", h.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", h.port, "Port to listen on (0: any free port)")->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", h.api_key, "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize")
      ->envname("HINDSIGHT_API_KEY");
  cmd->add_option("--served-model-name", h.served_model_name, "Model name in the API (default: the file's stem)");
  cmd->add_option("--request-timeout", h.request_timeout_s, "Seconds before a request is aborted (0: never)")
      ->check(CLI::Range(0.0, 1e7))->capture_default_str();
  cmd->add_option("--access-log", h.access_log_path,
                  "Append one JSON object per HTTP request to this file (time, request id, client, method, path, "
                  "status, duration)");
  cmd->add_option("--http-threads", h.http_threads,
                  "Worker threads that parse, template, tokenize and submit requests (streams and open "
                  "connections hold none)")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--io-threads", h.io_threads, "Threads that accept, read and write the sockets")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--max-connections", h.max_connections,
                  "Open connections served; beyond it a connection gets 503 (but /health and /metrics) and is closed")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--header-timeout", h.header_timeout_s,
                  "Seconds a client has to send a whole request head (from its connection or first byte)")
      ->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  cmd->add_option("--body-read-timeout", h.body_read_timeout_s, "Seconds each read of a request body may take")
      ->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  cmd->add_option("--keep-alive-timeout", h.keep_alive_timeout_s, "Seconds an idle connection is kept between requests")
      ->check(CLI::Range(0.01, 3600.0))->capture_default_str();
  EngineConfig& e = o->engine;
  cmd->add_option("--max-model-len", e.max_model_len, "Prompt + completion tokens per request (default: the model's context)")
      ->check(CLI::Range(16, 1 << 24));
  cmd->add_option("--max-num-seqs", e.max_num_seqs, "Sequences running at once")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Tokens computed per engine step")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--max-waiting", e.max_waiting, "Queued requests beyond this get 429")->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--prefill-cost-ratio", e.prefill_cost_ratio,
                  "Cap a step's cost at this multiple of a decode-only step while decodes run (0: off)")
      ->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching, "Do not reuse cached prompt prefixes");
  cmd->add_option("--state-checkpoints", o->state_checkpoints,
                  "Hybrid models: recurrent-state checkpoint slots of the prefix cache, each state_bytes_per_slot of "
                  "memory (-1: 2 x --max-num-seqs; 0: prefix caching off for the model)")
      ->check(CLI::Range(-1, 1 << 16))->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "Seconds after SIGTERM/SIGINT for requests in flight to finish before they are cancelled")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->callback([o, cmd, &run] {
    o->ctx_given = cmd->get_option("--ctx-size")->count() > 0;
    run = [o] { return run_serve(*o); };
  });
}

}  // namespace hs::app
