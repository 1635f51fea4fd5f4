// The end-of-run picture: aps_plot (tools/plot_run.py) as a child process. framework/train is
// the only engine layer that starts processes.
#include "framework/train/Plot.h"

#include "framework/core/Logging.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace aps::train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kSystemPython = "/usr/bin/python3";  // Debian's python3-matplotlib is its
constexpr int kNoMatplotlib = 3;                           // plot_run.py's exit status without matplotlib
constexpr auto kTimeout = std::chrono::seconds(120);       // a hung script must not hang the run

// $APS_PLOT, else aps_plot beside this executable, else "" (also for an empty $APS_PLOT).
std::string findPlotScript() {
  if (const char* env = std::getenv("APS_PLOT")) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path script = self.parent_path() / "aps_plot";
  return ::access(script.c_str(), R_OK) == 0 ? script.string() : std::string();
}

struct ChildResult {
  int exitCode = -1;   // -1: it did not run, or it was killed
  std::string output;  // the last few kB of its stdout and stderr, or why it did not run
};

// What `fd` delivers until end of file or `deadline` (then `timedOut`), its last few kB.
std::string readUntilEnd(int fd, Clock::time_point deadline, bool& timedOut) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timedOut = ready == 0;
      return out;
    }
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return out;
    out.append(buffer, static_cast<size_t>(got));
    if (out.size() > 8192) out.erase(0, out.size() - 4096);
  }
}

// Runs argv (argv[0] a path; PATH is not searched) with stdin from /dev/null and stdout and
// stderr into a pipe; waits for it, killing it after kTimeout.
ChildResult runChild(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {-1, fmt::format("pipe: {}", std::strerror(errno))};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return {-1, fmt::format("cannot run {}: {}", argv[0], std::strerror(spawned))};
  }
  bool timedOut = false;
  ChildResult result{-1, readUntilEnd(fds[0], Clock::now() + kTimeout, timedOut)};
  ::close(fds[0]);
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut) result.output = fmt::format("killed after {} s", kTimeout.count());
  if (!timedOut && WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  if (!timedOut && WIFSIGNALED(status)) result.output += fmt::format(" (killed by signal {})", WTERMSIG(status));
  return result;
}

// The last non-empty line of a child's output: its error message.
std::string lastLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const size_t newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

bool nonEmptyFile(const std::string& path) {
  std::error_code ec;
  const bool file = fs::is_regular_file(path, ec);
  const auto size = file ? fs::file_size(path, ec) : 0;
  return file && !ec && size > 0;
}

}  // namespace

std::string plotPathFor(const std::string& metricsPath) {
  const fs::path metrics(metricsPath);
  if (metrics.extension() == ".png") return metricsPath + ".png";  // never the metrics file itself
  return (metrics.parent_path() / metrics.stem()).string() + ".png";
}

bool plotRun(const std::string& metricsPath, const std::string& pngPath) {
  try {
    const std::string script = findPlotScript();
    if (script.empty()) {
      spdlog::debug("no run plot: no aps_plot beside this executable (APS_PLOT unset or empty)");
      return false;
    }
    if (fs::path(pngPath).lexically_normal() == fs::path(metricsPath).lexically_normal()) {
      spdlog::warn("run plot not written: '{}' is the metrics file", pngPath);
      return false;
    }
    std::error_code ec;
    fs::remove(pngPath, ec);  // an earlier run's picture must not pass for this one's
    std::vector<std::string> argv{script, metricsPath, "-o", pngPath};
    if (::access(kSystemPython, X_OK) == 0) argv.insert(argv.begin(), kSystemPython);  // else the script's #!
    const ChildResult child = runChild(argv);
    if (child.exitCode == 0 && nonEmptyFile(pngPath)) {
      spdlog::info("run plot {}", pngPath);
      return true;
    }
    if (child.exitCode == kNoMatplotlib) {
      spdlog::info("no run plot: matplotlib is missing (apt-get install python3-matplotlib)");
    } else {
      spdlog::warn("run plot {} not written ({}, exit status {}): {}", pngPath, script, child.exitCode,
                   lastLine(child.output));
    }
  } catch (const std::exception& e) {
    spdlog::warn("run plot {} not written: {}", pngPath, e.what());
  }
  return false;
}

}  // namespace aps::train
