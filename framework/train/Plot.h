#pragma once

#include <string>

namespace aps::train {

// The picture of a run (tools/plot_run.py, installed as aps_plot) drawn from its metrics file.
// The script is $APS_PLOT when that is set (set and empty: no picture), else `aps_plot` beside
// the running executable; it runs under /usr/bin/python3 (Debian's matplotlib) or, without
// one, its own #! line, with its output kept for the warning. Returns whether a non-empty
// `pngPath` was written. Never throws: no script, no matplotlib or a failing script only logs
// (a warning, or at debug level where there is simply nothing to draw with).
bool plotRun(const std::string& metricsPath, const std::string& pngPath);

// `<metrics file's folder>/<its stem>.png`: where a run's picture goes.
std::string plotPathFor(const std::string& metricsPath);

}  // namespace aps::train
