// app/main.cpp — the `hindsight` binary: one CLI11 app, one subcommand per file.
//
// Subcommands register themselves through the functions declared in app/commands.h; this
// file only builds the app, parses argv and runs the chosen command.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "app/commands.h"

int main(int argc, char** argv) {
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
