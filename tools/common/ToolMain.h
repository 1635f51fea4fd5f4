#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace aps {

// Adds --version to `app`, parses argv, runs `body` and turns errors into an exit code:
// a CLI11 error prints usage (exit 2 for bad arguments); an aps::Error or other exception
// prints "<tool>: error: <message>" on stderr and returns 1. Use as
//   int main(int argc, char** argv) { CLI::App app{"..."}; ...; return runTool(app, argc, argv, [&] { ... }); }
int runTool(CLI::App& app, int argc, char** argv, const std::function<void()>& body);

}  // namespace aps
