#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace aps {

// Exit codes of every aps tool: 0 success, 1 a runtime error (bad input file, failed run),
// 2 a usage error (unknown option, missing or malformed argument).
inline constexpr int kRuntimeError = 1;
inline constexpr int kUsageError = 2;
// aps_train only: stopped by SIGTERM/SIGUSR1 after writing a checkpoint (EX_TEMPFAIL); rerun
// with --resume auto.
inline constexpr int kPreempted = 75;

// Whether this process asked glibc for transparent huge pages (runTool re-executes a tool once
// with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 unless APS_HUGE_PAGES=0), and what the kernel
// offers ("always", "madvise", "never", or "unknown"), with the process's GLIBC_TUNABLES: the
// line aps_info prints.
std::string hugePagesStatus();

// Adds --version to `app`, parses argv, runs `body` and turns errors into an exit code:
// a command-line error prints "<tool>: error: <message>" and returns 2; an aps::Error or other
// exception prints "<tool>: error: <message>" on stderr and returns 1 (the aps source location
// of an aps::Error goes to the debug log only). Use as
//   int main(int argc, char** argv) { CLI::App app{"..."}; ...; return runTool(app, argc, argv, [&] { ... }); }
int runTool(CLI::App& app, int argc, char** argv, const std::function<void()>& body);

}  // namespace aps
