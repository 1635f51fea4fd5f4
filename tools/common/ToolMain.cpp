#include "tools/common/ToolMain.h"

#include "framework/core/Error.h"
#include "framework/core/Version.h"

#include <cstdio>
#include <exception>

namespace aps {

int runTool(CLI::App& app, int argc, char** argv, const std::function<void()>& body) {
  app.set_version_flag("--version", std::string(app.get_name()) + " (aps) " + APS_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace aps
