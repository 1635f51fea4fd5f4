#include "tools/common/ToolMain.h"

#include "framework/core/Error.h"
#include "framework/core/Version.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

namespace aps {

namespace {

// glibc (2.35 and later) backs the C heap with transparent huge pages when the tunable
// glibc.malloc.hugetlb=1 is set, which it reads only at process start. A training step walks
// every activation plane by plane; with 4 KiB pages each plane tends to cost a TLB miss, and
// with 2 MiB pages a ResNet-20 step (1x28x28, batch 128, 2 threads) ran 4-5% faster for 1.5%
// more memory. So a tool whose environment does not set it re-executes itself once with it
// set, before it has done anything; APS_HUGE_PAGES=0 (or a GLIBC_TUNABLES that already names
// the tunable) keeps the process as it is. Where the kernel offers no huge pages, or the C
// library does not know the tunable, it changes nothing.
void reexecWithHugePages(char** argv) {
  const char* off = std::getenv("APS_HUGE_PAGES");
  if (off != nullptr && std::string_view(off) == "0") return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool had = tunables != nullptr;
  const std::string original = had ? tunables : "";  // setenv may invalidate `tunables`
  if (original.find("glibc.malloc.hugetlb") != std::string::npos) return;
  const std::string value = original + (had && !original.empty() ? ":" : "") + "glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc): go on as we are, without the tunable.
  if (had) {
    setenv("GLIBC_TUNABLES", original.c_str(), 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace

std::string hugePagesStatus() {
  std::string mode = "unknown";
  std::ifstream sys("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (std::getline(sys, line)) {  // "always [madvise] never": the bracketed one is in force
    const auto open = line.find('['), close = line.find(']');
    if (open != std::string::npos && close > open) mode = line.substr(open + 1, close - open - 1);
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const bool asked =
      tunables != nullptr && std::string_view(tunables).find("glibc.malloc.hugetlb=1") != std::string_view::npos;
  return std::string(asked ? "asked of glibc" : "not asked") + " (GLIBC_TUNABLES=" + (tunables ? tunables : "") +
         "; kernel transparent huge pages: " + mode + ")";
}

int runTool(CLI::App& app, int argc, char** argv, const std::function<void()>& body) {
#if defined(__GLIBC__) && defined(__linux__)
  reexecWithHugePages(argv);
#endif
  app.set_version_flag("--version", std::string(app.get_name()) + " (aps) " + APS_VERSION);
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // --help: usage on stdout, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A usage error: one line in the tools' own form, exit 2 (not CLI11's own codes).
    std::fprintf(stderr, "%s: error: %s\n%s: run '%s --help' for usage\n", name.c_str(), e.what(), name.c_str(),
                 name.c_str());
    return kUsageError;
  }
  try {
    body();
  } catch (const Error& e) {
    // aps's own source location is for debugging, not for the user's message.
    if (!e.where().empty()) spdlog::debug("error raised at {}", e.where());
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return kRuntimeError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", name.c_str());
    return kRuntimeError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return kRuntimeError;
  }
  return 0;
}

}  // namespace aps
