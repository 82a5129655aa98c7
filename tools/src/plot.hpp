#pragma once
// `actortrain plot METRICS.jsonl --out DIR`: figures of a run from its JSON-lines metrics
// (fit_options / cluster metrics_file; the event kinds of actortrain/actors/cluster/events.hpp).
//
// Each figure is written three ways into DIR: NAME.dat (the numbers plotted, one row per
// point, whitespace-separated with a header line), NAME.gp (the gnuplot script) and
// NAME.png (gnuplot's pngcairo output):
//   epochs     loss and accuracy per epoch, training and validation
//   steps      loss per applied step, raw and smoothed (exponential moving average)
//   throughput samples/s per worker over time (applied steps' examples per time bin)
//   staleness  histogram of the applied steps' staleness
//   timeline   applied steps over time, with failures (worker_lost, ps_lost,
//              dataset_lost), recoveries (worker_joined after the first, ps_restored,
//              dataset_rebuilt, resumed), re-queued steps and checkpoints marked;
//              timeline_events.dat lists the marks
// Failures, recoveries and checkpoints are also marked on the steps and throughput
// figures. A figure without data in the run (no epoch ended, no step applied) is not
// drawn, and an older one of its name is removed; a panel without data (accuracy of a
// regression) is left out; each is said. Runs appended to one file are told apart by
// their "id" (older files: a second run_begin, or the time going back) and drawn each
// into DIR/run-N.
// A line cut short (a run killed mid-write: the last line without its newline, or one
// continued by the next run's first line) is skipped and counted; any other line that is
// not a JSON object with an "event" fails with FILE:LINE and what is wrong.

#include <cstdint>
#include <string>
#include <vector>

namespace actortrain::tools {

/// Writes NAME.dat (`data`), NAME.gp and NAME.png into `dir` with gnuplot: `script` is
/// what follows the terminal and output lines, with DATA naming NAME.dat. Returns the
/// png's path; throws std::runtime_error naming what failed (gnuplot missing, ...).
std::string render_figure(const std::string& dir, const std::string& name, const std::string& data,
                          const std::string& script);
/// `actortrain plot METRICS.jsonl --out DIR [flags]`; returns the process exit code.
int plot_command(int argc, char** argv, int first);

}  // namespace actortrain::tools
