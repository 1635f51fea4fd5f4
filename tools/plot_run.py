#!/usr/bin/env python3
"""A picture of aps_train runs: one PNG from one or more metrics files (logging.metrics_file).

    aps_plot RUN_FOLDER                     # RUN_FOLDER/metrics.png from its metrics.jsonl
    aps_plot METRICS.jsonl [MORE.jsonl ...] -o OUT.png [--labels a,b]
    aps_plot RUN_FOLDER --csv metrics.csv   # every record as a row, for a spreadsheet

Panels: training loss per step with the test loss; test accuracy (top-1, or mIoU for a
segmentation run) at each evaluation; learning rate; images/s; communication time per step
(exposed and total); bytes sent per step; the fidelity probe's relative error of each layer's
reduced gradient (thin lines) and its median over layers (thick), and the median cosine
(precision.probe_interval's "probe" records); and per run (the first four) a heat map of the
fraction of each layer's gradient values that quantisation flushed to zero or saturated.
Several files overlay in the line panels (labels default to the files' names). A panel
without data says so.

Exit status: 0 written; 1 a metrics file that cannot be read, is truncated or is not a metrics
file (the message names the file and line), or the PNG cannot be written; 2 usage; 3
matplotlib is missing (Debian: apt-get install python3-matplotlib). aps_train runs this at the
end of a run (aps_plot next to it, or $APS_PLOT) to draw <metrics file>.png beside the metrics
(APS_PLOT set and empty: no picture).
"""

import argparse
import collections
import math
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The shared metrics reader: tools/reproduce/metrics.py in the source tree; beside bin/ in
# share/aps/tools/ for the build tree's and the installed copy (bin/aps_plot).
for folder in (HERE / "reproduce", HERE.parent / "share" / "aps" / "tools"):
    if (folder / "metrics.py").is_file():
        sys.path.insert(0, str(folder))
        break
try:
    from metrics import MetricsError, draw_layer_heatmap, is_segmentation, layer_stats, load_records, number, \
        of_type, per_step
except ImportError as e:
    print(f"aps_plot: error: cannot load the metrics reader (metrics.py beside {HERE}): {e}", file=sys.stderr)
    sys.exit(1)

MAX_HEATMAP_RUNS = 4  # one row of heat maps per run, for the first runs


class Run:
    """One metrics file's series, ready to draw."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        records = load_records(path)
        self.records = records
        self.train = of_type(records, "train")
        self.tests = of_type(records, "eval", "final")
        self.final = next((r for r in reversed(self.tests) if r["type"] == "final"), None)
        self.segmentation = is_segmentation(records)
        self.exposed = per_step(records, "exposed_comm_s")
        self.comm = per_step(records, "comm_s")
        self.layers = layer_stats(self.train)
        self.probes = of_type(records, "probe")
        formats = of_type(records, "formats")
        self.formats = collections.Counter(layer.get("format", "?") for layer in (formats[-1].get("layers") or [])) \
            if formats else collections.Counter()

    def series(self, records, key, scale=1.0):
        """(steps, values) of a field; non-finite values are gaps."""
        xs, ys = [], []
        for r in records:
            if isinstance(r.get("step"), int) and key in r:
                v = number(r[key]) * scale
                xs.append(r["step"])
                ys.append(v if math.isfinite(v) else math.nan)
        return xs, ys

    def summary(self):
        """One line for the title: the wire formats and the final result."""
        fmt = ", ".join(f"{name} x{n}" if len(self.formats) > 1 else name for name, n in self.formats.most_common(3))
        text = f"{self.label}: {fmt or 'formats unknown'}"
        if self.final is None:
            return text + ", no final evaluation (unfinished?)"
        metric = ("mIoU", "miou") if self.segmentation else ("top-1", "top1")
        text += f", final test {metric[0]} {100 * number(self.final.get(metric[1])):.2f}% at step {self.final.get('step')}"
        return text + (" DIVERGED" if self.final.get("diverged") else "")


def no_data(ax, what):
    ax.text(0.5, 0.5, f"no {what} in the metrics", ha="center", va="center", transform=ax.transAxes,
            color="0.45", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])


def whole_steps(ax):
    """Whole training steps on the x axis, a single step one step wide."""
    from matplotlib.ticker import MaxNLocator

    lo, hi = ax.get_xlim()
    if hi - lo < 2:
        middle = (lo + hi) / 2
        ax.set_xlim(middle - 1, middle + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def style(ax, title, ylabel, drawn, what):
    ax.set_title(title, fontsize=9)
    if not drawn:
        no_data(ax, what)
        return
    ax.set_xlabel("training step", fontsize=8)
    whole_steps(ax)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def line(ax, xs, ys, color, label, **kw):
    """Plots one series (markers where it has few points); returns whether it had any value."""
    if not any(math.isfinite(y) for y in ys):
        return False
    ax.plot(xs, ys, color=color, label=label, marker="o" if len(xs) <= 20 else None, markersize=3, **kw)
    return True


def draw_lines(axes, runs, colors):
    loss, acc, lr, ips, comm, sent = axes
    drawn = collections.Counter()
    for run, color in zip(runs, colors):
        drawn["loss"] += line(loss, *run.series(run.train, "loss"), color, f"{run.label} train")
        if not run.segmentation:
            drawn["loss"] += line(loss, *run.series(run.tests, "loss"), color, f"{run.label} test", linestyle="--")
        key = "miou" if run.segmentation else "top1"
        drawn["acc"] += line(acc, *run.series(run.tests, key, 100.0), color,
                             f"{run.label} ({'mIoU' if run.segmentation else 'top-1'})")
        drawn["lr"] += line(lr, *run.series(run.train, "lr"), color, run.label)
        drawn["ips"] += line(ips, *run.series(run.train, "images_per_s"), color, run.label)
        for points, style_, name in ((run.exposed, "-", "exposed"), (run.comm, ":", "total")):
            drawn["comm"] += line(comm, [s for s, _ in points], [1e3 * v for _, v in points], color,
                                  f"{run.label} {name}", linestyle=style_)
        drawn["sent"] += line(sent, *run.series(run.train, "bytes_sent_per_step", 1e-3), color, run.label)
    any_seg = any(r.segmentation for r in runs)
    style(loss, "loss (training: interval mean; test: dashed)", "cross-entropy", drawn["loss"], "loss")
    style(acc, "test accuracy" + (" (mIoU for segmentation)" if any_seg else " (top-1)"), "%", drawn["acc"],
          "evaluation")
    style(lr, "learning rate", "lr", drawn["lr"], "learning rate")
    style(ips, "throughput", "images/s", drawn["ips"], "throughput")
    style(comm, "communication per step (exposed: solid; total: dotted)", "ms", drawn["comm"],
          "communication time")
    style(sent, "bytes one rank sends per step", "kB", drawn["sent"], "traffic")


def draw_probe(axes, runs, colors):
    """The fidelity probe: each layer's rel_error (thin), the median over layers (thick), the median cosine."""
    rel, cos = axes
    drawn = collections.Counter()
    for run, color in zip(runs, colors):
        per_layer = collections.defaultdict(list)
        for record in run.probes:
            for layer in record.get("layers") or []:
                per_layer[layer.get("name", "?")].append((record["step"], number(layer.get("rel_error"))))
        for points in per_layer.values():
            finite = [(x, y) for x, y in points if math.isfinite(y)]
            if finite:
                rel.plot([x for x, _ in finite], [y for _, y in finite], color=color, alpha=0.25, linewidth=0.6)
        drawn["rel"] += line(rel, *run.series(run.probes, "median_rel_error"), color, f"{run.label} median",
                             linewidth=2)
        drawn["cos"] += line(cos, *run.series(run.probes, "median_cosine"), color, run.label)
    style(rel, "fidelity probe: relative error of each layer's reduced gradient (median: thick)",
          "||lp - fp32|| / ||fp32||", drawn["rel"], "\"probe\" records (precision.probe_interval)")
    if drawn["rel"]:
        rel.set_yscale("symlog", linthresh=1e-4)
        rel.set_ylim(bottom=0)
    style(cos, "fidelity probe: cosine to the exact fp32 sum (median over layers)", "cosine", drawn["cos"],
          "\"probe\" records (precision.probe_interval)")


def draw_heatmaps(fig, grid, first_row, runs):
    from matplotlib.ticker import MaxNLocator

    shown = runs[:MAX_HEATMAP_RUNS]
    image = None
    axes = []
    for i, run in enumerate(shown):
        for col, key in enumerate(("flushed", "saturated")):
            ax = fig.add_subplot(grid[first_row + i, col])
            axes.append(ax)
            title = f"{run.label}: fraction of each layer's gradient values {key}"
            if run.layers is None:
                ax.set_title(title, fontsize=9)
                no_data(ax, "per-layer statistics (\"layers\")")
                continue
            image = draw_layer_heatmap(ax, run.layers, key, title, max_names=16)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="fraction (log scale; < 1e-5 shown at 1e-5)")


def plot(runs, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heat_rows = min(len(runs), MAX_HEATMAP_RUNS)
    line_rows = 4 if any(run.probes for run in runs) else 3  # the probe's row only when some run has it
    fig = plt.figure(figsize=(13, 3.3 * line_rows + 3.6 * heat_rows + 0.3 * len(runs)), layout="constrained")
    grid = fig.add_gridspec(line_rows + heat_rows, 2, height_ratios=[1] * line_rows + [1.1] * heat_rows)
    axes = [fig.add_subplot(grid[row, col]) for row in range(line_rows) for col in range(2)]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = [colors[i % len(colors)] for i in range(len(runs))]
    draw_lines(axes[:6], runs, colors)
    if line_rows == 4:
        draw_probe(axes[6:], runs, colors)
    draw_heatmaps(fig, grid, line_rows, runs)
    title = "\n".join(run.summary() for run in runs)
    if len(runs) > MAX_HEATMAP_RUNS:
        title += f"\n(heat maps of the first {MAX_HEATMAP_RUNS} runs)"
    fig.suptitle(title, fontsize=9)
    # Written beside the target and renamed: a reader never sees half a PNG.
    target = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=80)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary file (mkstemp's is private)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


def labels_for(paths, given):
    if given is not None:
        return given
    stems = [Path(p).stem for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    return [f"{Path(p).parent.name}/{Path(p).stem}" for p in paths]  # metrics.jsonl in several run folders


class Parser(argparse.ArgumentParser):
    def error(self, message):
        """A usage error in the aps tools' own form (tools/common/ToolMain.cpp): exit 2."""
        self.exit(2, f"aps_plot: error: {message}\naps_plot: run 'aps_plot --help' for usage\n")


def parse_args(argv):
    p = Parser(prog="aps_plot", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("metrics", nargs="+", help="aps_train metrics files (JSON lines), or run folders (their metrics.jsonl)")
    p.add_argument("-o", "--output", help="the PNG to write (default for one run: beside its metrics file, "
                                          "metrics.jsonl -> metrics.png; needed for several)")
    p.add_argument("--labels", help="comma-separated legend labels, one per metrics file (default: the file names)")
    p.add_argument("--csv", help="write every record as a CSV row (columns: run, time, type, epoch, step, then each "
                                 "number or word any record has; nested values left out), and no picture unless -o")
    args = p.parse_args(argv)
    args.metrics = [str(Path(m) / "metrics.jsonl") if Path(m).is_dir() else m for m in args.metrics]
    if args.labels is not None:
        args.labels = args.labels.split(",")
        if len(args.labels) != len(args.metrics):
            p.error(f"--labels has {len(args.labels)} labels for {len(args.metrics)} metrics files")
    if args.output is None and args.csv is None:
        if len(args.metrics) > 1:
            p.error("-o OUT.png is needed to draw several metrics files into one picture")
        args.output = str(Path(args.metrics[0]).with_suffix(".png"))
    return args


def write_csv(runs, path):
    """Every record of every run as one row; written to a temporary file and renamed."""
    import csv
    fixed = ["run", "time", "type", "epoch", "step"]
    columns = []
    for run in runs:
        for record in run.records:
            for key, value in record.items():
                if key not in fixed and key not in columns and not isinstance(value, (dict, list)):
                    columns.append(key)
    target = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=target.name + ".", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(fixed + columns)
            for run in runs:
                for r in run.records:
                    row = [run.label] + [r.get(k, "") for k in fixed[1:]] + [r.get(k, "") for k in columns]
                    out.writerow(["" if isinstance(v, (dict, list)) else v for v in row])
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
    return len(columns)


def import_matplotlib(argv):
    """matplotlib, or /usr/bin/python3 (Debian's python3-matplotlib) in place of a python3
    without it; returns an exit status when there is none."""
    try:
        import matplotlib  # noqa: F401
        return 0
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system):
            os.execv(system, [system, str(Path(__file__).resolve())] + argv)
        print("aps_plot: error: matplotlib is missing (apt-get install python3-matplotlib)", file=sys.stderr)
        return 3


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        runs = [Run(path, label) for path, label in zip(args.metrics, labels_for(args.metrics, args.labels))]
    except MetricsError as e:
        print(f"aps_plot: error: {e}", file=sys.stderr)
        return 1
    if args.csv is not None:
        if not write_output(write_csv, runs, args.csv):
            return 1
        if args.output is None:
            return 0
    status = import_matplotlib(argv)
    if status:
        return status
    return 0 if write_output(plot, runs, args.output) else 1


def write_output(writer, runs, path):
    """writer(runs, path), reported; False when the file cannot be written."""
    try:
        writer(runs, path)
    except OSError as e:
        print(f"aps_plot: error: cannot write '{path}': {e.strerror or e}", file=sys.stderr)
        return False
    print(f"aps_plot: wrote {path}")
    return True


if __name__ == "__main__":
    sys.exit(main())
