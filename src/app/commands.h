// app/commands.h — each subcommand adds itself to the CLI app and, when chosen, stores the
// function that runs it (returning the process exit code) in `run`.
#pragma once

#include <functional>

namespace CLI { class App; }

namespace hs::app {

void register_inspect(CLI::App& app, std::function<int()>& run);
void register_devices(CLI::App& app, std::function<int()>& run);
void register_generate(CLI::App& app, std::function<int()>& run);
void register_chat(CLI::App& app, std::function<int()>& run);
void register_bench(CLI::App& app, std::function<int()>& run);
void register_fit_sketch(CLI::App& app, std::function<int()>& run);
void register_eval(CLI::App& app, std::function<int()>& run);
void register_serve(CLI::App& app, std::function<int()>& run);

}  // namespace hs::app
