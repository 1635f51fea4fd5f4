"""Reading aps_train's JSON-lines metrics files (logging.metrics_file), shared by
tools/reproduce/reproduce.py and tools/plot_run.py (aps_plot).

A metrics file holds one JSON object per line, each with a "type":
  "formats"  every layer's wire format, at the start of a run (and of each resume)
  "train"    one logging interval: loss (the interval's mean), lr, images_per_s, comm_s and
             exposed_comm_s (summed over the interval's steps), bytes_sent_per_step, and
             "layers": per-layer statistics (name, shift, flushed, saturated, rel_error)
  "eval"     a test evaluation after an epoch; "final" the last one (top1, top5, loss, miou,
             pixel_accuracy as fractions)
  "format"   a layer whose format hybrid_auto widened
Non-finite numbers are written as the strings "inf", "-inf" and "nan".

Python 3 standard library only (matplotlib is passed in by the callers that draw).
"""

import json
import math


class MetricsError(Exception):
    """A metrics file that cannot be read, or a line of it that is not a record."""


def read_records(path):
    """The JSON lines of a metrics file, leniently: a torn last line (a killed run) ends the
    records, and a missing file has none. For a sweep that reads runs in any state."""
    records = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    break
    except FileNotFoundError:
        pass
    return records


def load_records(path):
    """The records of a metrics file, strictly: raises MetricsError naming the file (and the
    line) when it cannot be read, a line is not a JSON object with a "type" (a truncated or
    foreign file), or it holds no record at all."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    torn = "" if line.endswith("\n") else " (truncated: the line does not end)"
                    raise MetricsError(f"{path}:{number}: not a JSON record{torn}: {e.msg} (column {e.colno})")
                if not isinstance(record, dict) or not isinstance(record.get("type"), str):
                    raise MetricsError(f"{path}:{number}: not a metrics record (a JSON object with a \"type\")")
                records.append(record)
    except OSError as e:
        raise MetricsError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise MetricsError(f"{path}: not a text file ({e.reason} at byte {e.start})") from e
    if not records:
        raise MetricsError(f"{path}: holds no metrics records")
    return records


def number(value):
    """A metric as a float: "inf"/"-inf"/"nan" strings as such, anything else missing as NaN."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return math.nan
    return math.nan


def of_type(records, *types):
    return [r for r in records if r.get("type") in types]


def interval_steps(records):
    """(record, steps in its interval) for every "train" record: the step count since the
    previous record (a "formats" record starts a run or a resume, so its step is where the
    counting restarts). Records that do not advance are left out."""
    previous = 0
    out = []
    for r in records:
        step = r.get("step")
        if not isinstance(step, int):
            continue
        if r.get("type") == "formats":
            previous = step
        elif r.get("type") == "train":
            if step > previous:
                out.append((r, step - previous))
            previous = step
    return out


def per_step(records, key):
    """(step, value / steps in the interval) of a "train" field summed over its interval
    (comm_s, exposed_comm_s, data_wait_s, compute_s)."""
    return [(r["step"], number(r.get(key)) / steps) for r, steps in interval_steps(records)]


def is_segmentation(records):
    """Whether the run's evaluations are segmentation's (mIoU, pixel accuracy) rather than
    classification's (top-1, top-5): a classification run writes 0 for mIoU and pixel accuracy."""
    tests = of_type(records, "eval", "final")
    return any(number(r.get("miou")) > 0 or number(r.get("pixel_accuracy")) > 0 for r in tests)


def layer_stats(train, compact=lambda v: v):
    """The per-layer statistics of "train" records as grids: {"layers": names in first-seen
    order, "steps": the records' steps, "flushed"/"saturated": [record][layer] fractions (None
    where a record lacks the layer)}; None when no record has any. `compact` maps each value."""
    layers = []
    for r in train:
        for layer in r.get("layers") or []:
            if layer["name"] not in layers:
                layers.append(layer["name"])
    if not layers:
        return None
    index = {name: i for i, name in enumerate(layers)}
    steps, flushed, saturated = [], [], []
    for r in train:
        if not r.get("layers"):
            continue
        f = [None] * len(layers)
        sat = [None] * len(layers)
        for layer in r["layers"]:
            f[index[layer["name"]]] = compact(number(layer.get("flushed")))
            sat[index[layer["name"]]] = compact(number(layer.get("saturated")))
        steps.append(r["step"])
        flushed.append(f)
        saturated.append(sat)
    return {"layers": layers, "steps": steps, "flushed": flushed, "saturated": saturated}


HEATMAP_FLOOR = 1e-5  # fractions below this are drawn at it (log colour scale)


def draw_layer_heatmap(ax, stats, key, title, show_names=True, max_names=24):
    """Draws stats[key] (layer_stats) on a matplotlib Axes: rows the layers, columns the logging
    intervals, a log colour scale from HEATMAP_FLOOR to 1 (missing values at the floor).
    Returns the image, for a colour bar."""
    from matplotlib.colors import LogNorm

    names = stats["layers"]
    def cell(value):
        return HEATMAP_FLOOR if value is None or math.isnan(value) else max(HEATMAP_FLOOR, value)

    grid = [[cell(stats[key][t][l]) for t in range(len(stats["steps"]))] for l in range(len(names))]
    steps = stats["steps"]
    extent = [0, steps[-1] if steps else 1, len(names) - 0.5, -0.5]
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma",
                      norm=LogNorm(vmin=HEATMAP_FLOOR, vmax=1.0), extent=extent)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("training step")
    ticks = list(range(0, len(names), max(1, len(names) // max_names)))
    ax.set_yticks(ticks)
    ax.set_yticklabels([names[t] for t in ticks] if show_names else [], fontsize=5)
    return image
