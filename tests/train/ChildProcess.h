#pragma once

// A child process for the reliability tests: aps_train (or mpirun) started with extra
// environment variables, optionally a file-size limit, its stdout and stderr in one file;
// waited for with a deadline, or killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace aps::train::testing {

class ChildProcess {
 public:
  struct Options {
    std::vector<std::string> environment;  // "NAME=value", added to this process's
    long fileSizeLimit = -1;               // RLIMIT_FSIZE in bytes (SIGXFSZ ignored); -1: none
  };

  ChildProcess(const std::vector<std::string>& argv, const std::string& outputFile, const Options& options) {
    // Everything that allocates happens before fork: the test process may have threads.
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      bool replaced = false;
      for (const auto& add : options.environment) {
        replaced = replaced || entry.substr(0, entry.find('=') + 1) == add.substr(0, add.find('=') + 1);
      }
      if (!replaced) environment.push_back(entry);
    }
    environment.insert(environment.end(), options.environment.begin(), options.environment.end());
    std::vector<char*> envp, args;
    for (auto& e : environment) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argvCopy = argv;
    for (auto& a : argvCopy) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ != 0) return;
    // Child: only async-signal-safe calls until exec.
    const int fd = ::open(outputFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::setpgid(0, 0);  // its own group, so that kill() reaches mpirun's children too
    if (options.fileSizeLimit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // ignored stays ignored across exec: writes fail with EFBIG
      const rlimit limit{static_cast<rlim_t>(options.fileSizeLimit), static_cast<rlim_t>(options.fileSizeLimit)};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ~ChildProcess() {
    if (!done_) {
      kill(SIGKILL);
      wait();
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Signals the child's whole process group.
  void kill(int signal) const { ::kill(-pid_, signal); }

  // Whether the child has ended (reaps it).
  bool poll() {
    if (done_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      status_ = status;
    }
    return done_;
  }

  // Waits up to `timeout`; returns false when the child is still running.
  bool waitFor(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!poll()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  void wait() {
    if (done_) return;
    ::waitpid(pid_, &status_, 0);
    done_ = true;
  }

  // The exit status, or 128 + signal for a child killed by a signal.
  int exitCode() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
};

inline std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace aps::train::testing
