// app/main.cpp — the `hindsight` binary: one CLI11 app, one subcommand per file.
//
// Subcommands register themselves through the functions declared in app/commands.h; this
// file only builds the app, parses argv and runs the chosen command, with a handler that
// prints the stack (raw addresses: `addr2line -e hindsight -f -C ADDR...` names them) when the
// process dies of a fatal signal, so a crash on a remote machine leaves something to read.
#include <execinfo.h>
#include <unistd.h>

#include <csignal>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "app/commands.h"

namespace {
// Async-signal-safe: write(2) and backtrace_symbols_fd only, then the default action.
void on_fatal_signal(int sig) {
  const char msg[] = "\nhindsight: fatal signal; stack (addr2line -e hindsight -f -C):\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
}  // namespace

int main(int argc, char** argv) {
  {
    void* warm[1];
    (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_fatal_signal);
  // Logs go to stderr: stdout carries command output (generated text, tables, JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("hindsight"));
  CLI::App app{"hindsight — long-context LLM inference server"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hindsight 0.1.0");
  std::function<int()> run;
  hs::app::register_inspect(app, run);
  hs::app::register_devices(app, run);
  hs::app::register_generate(app, run);
  hs::app::register_chat(app, run);
  hs::app::register_bench(app, run);
  hs::app::register_fit_sketch(app, run);
  hs::app::register_eval(app, run);
  hs::app::register_serve(app, run);
  CLI11_PARSE(app, argc, argv);
  return run ? run() : 0;
}
