#include "tools/common/ToolMain.h"

#include "framework/core/Error.h"
#include "framework/core/Version.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>

namespace aps {

int runTool(CLI::App& app, int argc, char** argv, const std::function<void()>& body) {
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
