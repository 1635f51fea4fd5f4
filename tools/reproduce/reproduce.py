#!/usr/bin/env python3
"""Runs the accuracy sweep of tools/reproduce/sweep_scale.json (or --sweep FILE) with aps_train and
writes docs/RESULTS.md (tables) and docs/results/*.png (plots) from the runs' metrics files.

    python3 tools/reproduce/reproduce.py --jobs 2     # the whole sweep (about 7 h on 2 cores), resumable
    python3 tools/reproduce/reproduce.py --quick      # a reduced sweep in minutes, docs under out/reproduce-quick
    python3 tools/reproduce/reproduce.py --report-only  # regenerate the docs from existing metrics
    python3 tools/reproduce/reproduce.py --only 's8-e3m0*' --list  # what would run, and how
    python3 tools/reproduce/reproduce.py --sweep tools/reproduce/sweep.json --check  # the short sweep's configs, dry

Python 3 standard library plus matplotlib (Debian's python3-matplotlib) for the plots.
A run whose metrics file already holds a "final" record is skipped, so an interrupted sweep
continues where it stopped. Each finished run's summary is also kept in the results store
(--results, default docs/results/runs/ID.json, a few kB each, committed): a run found there is
skipped too, so a sweep can run in parts, on several machines, each part committed.
"""

import argparse
import concurrent.futures
import copy
import datetime
import fnmatch
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import draw_layer_heatmap, layer_stats, per_step, read_records  # noqa: E402 (tools/reproduce/metrics.py)

ROOT = Path(__file__).resolve().parents[2]
READING = Path(__file__).resolve().parent / "reading.md"
PYTORCH = Path(__file__).resolve().parent / "pytorch.md"  # DDP with the aps hook beside aps_train (by hand)
DEFAULT_SWEEP = ROOT / "tools" / "reproduce" / "sweep_scale.json"
DEFAULT_APS_TRAIN = ROOT / "build" / "bin" / "aps_train"

# Plot families, in the order the report shows them.
FAMILY_TITLES = {
    "fp32_fp16": "fp32 and fp16",
    "e5m2": "FP8 E5M2",
    "e4m3": "FP8 E4M3 (with FP8-LM and ring)",
    "e3m0": "4-bit E3M0",
    "e2m1": "4-bit E2M1",
    "mx": "OCP MX block-scaled types",
    "hybrid": "hybrid precision",
    "dettmers": "Dettmers 8-bit",
}


class SweepError(Exception):
    """A malformed sweep file or command line; reported without a traceback."""


# ----------------------------------------------------------------------------- the sweep


class Run:
    """One aps_train invocation: a setting (model, data, ranks), a variant (wire format) and a seed."""

    def __init__(self, setting_name, setting, variant, seed):
        self.setting = setting_name
        self.variant = variant["name"]
        self.seed = seed
        self.id = f"{setting_name}-{variant['name']}-s{seed}"
        self.config = setting["config"]
        self.overrides = dict(setting["set"])
        self.overrides.update(variant.get("set", {}))
        self.overrides["seed"] = seed
        for key in ("data.batch_size", "comm.world_size"):
            if key not in self.overrides:
                raise SweepError(f"sweep: setting '{setting_name}' must set '{key}' (the report needs the global batch)")
        self.world = int(self.overrides["comm.world_size"])
        self.setting_is_seg = setting["table"] == "segmentation"
        # Per-layer statistics are kept for the heat maps (one seed's: they are the bulk of summary.json).
        self.heatmap = variant.get("heatmap") if seed == variant["seeds"][0] else None
        # Model parallelism: the M ranks of a group share a batch (world = D x M).
        self.model_parallel = int(self.overrides.get("parallel.model_parallel", 1))
        self.global_batch = int(self.overrides["data.batch_size"]) * (self.world // self.model_parallel)
        self.expected_steps = expected_steps(self.overrides, self.global_batch)


def expected_steps(overrides, global_batch):
    """The optimizer steps a run will take (epochs x training samples / global batch, at most
    max_steps), or None when its keys do not say: the weight of its share of the sweep's ETA."""
    try:
        steps = float(overrides["epochs"]) * int(overrides["data.train_samples"]) / global_batch
        if "max_steps" in overrides:
            steps = min(steps, int(overrides["max_steps"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return max(1, round(steps))


def load_sweep(path, quick, only=()):
    try:
        sweep = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SweepError(f"sweep file '{path}': {e}") from e
    sweep = copy.deepcopy(sweep)
    settings = sweep["settings"]
    if quick:
        for name, keys in sweep["quick"]["settings"].items():
            if name not in settings:
                raise SweepError(f"sweep: quick.settings names unknown setting '{name}'")
            settings[name]["set"].update(keys)
    runs = []
    seen = set()
    for variant in sweep["variants"]:
        for setting_name in variant["settings"]:
            if setting_name not in settings:
                raise SweepError(f"sweep: variant '{variant['name']}' names unknown setting '{setting_name}'")
            # A setting may cap the seeds (the segmentation table needs no spread).
            for seed in variant["seeds"][: settings[setting_name].get("max_seeds")]:
                run = Run(setting_name, settings[setting_name], variant, seed)
                if run.id in seen:
                    raise SweepError(f"sweep: run '{run.id}' appears twice")
                seen.add(run.id)
                runs.append(run)
    names = {v["name"] for v in sweep["variants"]}
    for c in sweep.get("contrasts", []):
        unknown = [c.get(k) for k in ("variant", "baseline") if c.get(k) not in names]
        if unknown or "label" not in c:
            raise SweepError(f"sweep '{path}': contrast {c} needs a label and two of its variants"
                             + (f" (unknown: {unknown})" if unknown else ""))
    if quick and not only:  # --quick --only PATTERN: any run, at the quick sizes
        wanted = sweep["quick"]["runs"]
        unknown = [w for w in wanted if w not in seen]
        if unknown:
            raise SweepError(f"sweep: quick.runs names unknown runs {unknown}")
        runs = [r for r in runs if r.id in wanted]
    return sweep, runs


def select(runs, patterns):
    if not patterns:
        return runs
    pats = [p for group in patterns for p in group.split(",") if p]
    chosen = [r for r in runs if any(fnmatch.fnmatchcase(r.id, p) for p in pats)]
    if not chosen:
        raise SweepError(f"--only {' '.join(patterns)} matches no run; runs are named SETTING-VARIANT-sSEED, e.g. {runs[0].id}")
    return chosen


def yaml_value(value):
    """A JSON value as the YAML text aps_train's --set parses (JSON flow syntax is YAML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value)


# ----------------------------------------------------------------------------- running


def metrics_path(out, run):
    return Path(out) / "metrics" / f"{run.id}.jsonl"


def stored_path(results, run):
    return Path(results) / f"{run.id}.json" if results else None


def stored_summary(results, run):
    """The committed summary of a finished run, or None."""
    path = stored_path(results, run)
    if path is None or not path.exists():
        return None
    try:
        s = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SweepError(f"results store: '{path}' is not JSON ({e}); delete it to rerun {run.id}") from e
    if s.get("status") != "ok" or s.get("id") != run.id:
        return None
    # A run of another configuration under the same name (the sweep file changed since) is stale;
    # summaries from before configurations were stored cannot be checked and are taken as they are.
    if "config" in s and s["config"] != run_config(run):
        return None
    return s


def run_config(run):
    """What a run trains, as stored with its summary: the base config and every override."""
    return {"file": run.config, "set": {k: run.overrides[k] for k in sorted(run.overrides)}}


def store_summary(results, summary):
    """Writes one finished run's summary into the store (a temporary file, then a rename)."""
    if not results or summary.get("status") != "ok":
        return
    path = Path(results) / f"{summary['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=None, separators=(",", ":"), sort_keys=True) + "\n")
    os.replace(tmp, path)


def is_complete(path):
    return any(r.get("type") == "final" for r in read_records(path))


def is_current(out, run):
    """The run's metrics file is finished and was written by this configuration: the command
    recorded beside it is this one, but for the binary's path and the thread count."""
    if not is_complete(metrics_path(out, run)):
        return False
    side = Path(out) / "metrics" / f"{run.id}.run.json"
    if not side.exists():
        return True  # written before commands were recorded

    def words(cmd):
        return [a for a in cmd[1:] if a != "--set" and not a.startswith("threads=")]
    return words(json.loads(side.read_text()).get("command", [""])) == words(command(run, "aps_train", out, 0))


def command(run, aps_train, out, threads):
    cmd = [str(Path(aps_train).resolve()), "--config", run.config]  # runs in the repository root
    overrides = dict(run.overrides)
    overrides["logging.metrics_file"] = str(metrics_path(out, run).resolve())
    overrides["output_dir"] = str((Path(out) / "runs" / run.id).resolve())  # config.yaml, train.log, checkpoints
    overrides["checkpoint.overwrite"] = True  # a rerun of an unfinished run starts it afresh
    if threads > 0:
        overrides["threads"] = threads
    for key, value in overrides.items():
        cmd += ["--set", f"{key}={yaml_value(value)}"]
    return cmd


def execute(run, aps_train, out, threads, jobs, started=lambda run: None, results=None):
    """Runs one configuration; returns (run, status, seconds). The log goes to out/logs/ID.log.
    `started(run)` is called when it really starts (not for a finished run that is skipped).
    A finished run's summary goes into the results store."""
    metrics = metrics_path(out, run)
    if is_current(out, run) or stored_summary(results, run) is not None:
        return run, "skipped", 0.0
    started(run)
    log = Path(out) / "logs" / f"{run.id}.log"
    cmd = command(run, aps_train, out, threads)
    start = time.monotonic()
    with open(log, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        # Idle OpenMP threads sleep instead of spinning: on a shared or oversubscribed machine
        # spinning threads of one run starve the others (and their own run's other threads).
        env = dict(os.environ)
        env.setdefault("OMP_WAIT_POLICY", "passive")
        rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    seconds = time.monotonic() - start
    status = "ok" if rc == 0 and is_complete(metrics) else f"failed (exit {rc})"
    side = {"id": run.id, "command": cmd, "exit_code": rc, "wall_seconds": seconds, "threads": threads, "jobs": jobs}
    (Path(out) / "metrics" / f"{run.id}.run.json").write_text(json.dumps(side, indent=1) + "\n")
    if status == "ok":
        store_summary(results, summarize_run(run, out))
    return run, status, seconds


def run_sweep(runs, args):
    out = Path(args.out)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    threads = 0 if args.jobs == 1 else max(1, cores // args.jobs)  # 0: aps_train uses every core
    failed = []
    done = 0
    complete = {r.id for r in runs if is_current(out, r) or stored_summary(args.results, r)}
    progress = SweepProgress(runs, args.jobs, complete=complete)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        pending = {pool.submit(execute, r, args.aps_train, out, threads, args.jobs, progress.started, args.results)
                   for r in runs}
        while pending:
            # Wake up every second to move the progress bar's clock (a terminal only).
            finished, pending = concurrent.futures.wait(pending, timeout=1.0,
                                                        return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                run, status, seconds = future.result()
                done += 1
                progress.finished(run, status, seconds)
                summary = ""
                if status == "ok":
                    final = next(r for r in read_records(metrics_path(out, run)) if r.get("type") == "final")
                    summary = (f"mIoU {100 * final['miou']:.2f}%" if run.setting_is_seg
                               else f"top-1 {100 * final['top1']:.2f}%")
                    summary += f" in {seconds:.0f} s"
                elif status != "skipped":
                    failed.append(run.id)
                    summary = f"see {out / 'logs' / (run.id + '.log')}: {last_error(out, run)}"
                progress.clear()
                print(f"[{done}/{len(runs)}] {run.id}: {status} {summary}".rstrip(), flush=True)
            progress.draw()
    progress.clear()
    return failed


def sweep_eta(finished, pending, running, jobs):
    """Seconds until the sweep ends, or None before any run has finished. finished: (seconds,
    expected steps) of the runs that ran; pending: expected steps of the runs not started;
    running: (seconds so far, expected steps) of the runs in progress. The mean time per
    expected step of the finished runs, times the work left, over the runs side by side."""
    if not finished or sum(w for _, w in finished) <= 0:
        return None
    per_step = sum(s for s, _ in finished) / sum(w for _, w in finished)
    work = per_step * sum(pending) + sum(max(0.0, per_step * w - s) for s, w in running)
    lanes = max(1, min(jobs, len(pending) + len(running)))
    return work / lanes


def clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class SweepProgress:
    """The sweep's progress bar on stderr (runs done/total, elapsed, ETA), only when stderr is a
    terminal: redirected to a log, nothing of it is written. Runs without expected steps weigh 1;
    `complete`: ids of runs that finished earlier (skipped at once, they weigh nothing)."""

    def __init__(self, runs, jobs, complete=(), stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty()
        weighted = all(r.expected_steps for r in runs)
        self.weight = {r.id: (r.expected_steps if weighted else 1) for r in runs}
        self.total, self.jobs, self.done = len(runs), jobs, 0
        self.begin = time.monotonic()
        self.running = {}  # run id -> when it started
        self.ran = []  # (seconds, weight) of the finished runs that ran
        self.waiting = set(self.weight) - set(complete)
        self.lock = threading.Lock()

    def started(self, run):  # from the pool's threads
        with self.lock:
            self.waiting.discard(run.id)
            self.running[run.id] = time.monotonic()

    def finished(self, run, status, seconds):
        with self.lock:
            self.waiting.discard(run.id)
            self.running.pop(run.id, None)
            self.done += 1
            if status != "skipped":
                self.ran.append((seconds, self.weight[run.id]))

    def line(self, width=30):
        now = time.monotonic()
        with self.lock:
            running = [(now - t, self.weight[i]) for i, t in self.running.items()]
            eta = sweep_eta(self.ran, [self.weight[i] for i in self.waiting], running, self.jobs)
            done = self.done
        filled = width * done // max(1, self.total)
        return (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} runs, elapsed {clock(now - self.begin)}, "
                f"ETA {'?' if eta is None else clock(eta)}")

    def draw(self):
        if self.enabled:
            self.stream.write("\r" + self.line() + "\033[K")
            self.stream.flush()

    def clear(self):
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def last_error(out, run):
    """The last line of a run's log that reports an error (aps_train prints 'aps_train: error: ...')."""
    try:
        lines = (Path(out) / "logs" / f"{run.id}.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    for line in reversed(lines):
        if "error" in line.lower():
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


# ----------------------------------------------------------------------------- collecting


def median_or_none(values):
    return statistics.median(values) if values else None


def compact(value):
    """Three significant digits: enough for a heat map, small enough to commit."""
    return None if value is None else float(f"{value:.3g}")


def as_float(value):
    """A metric value as aps_train writes it: a number, or "inf", "-inf", "nan" (JSON has no
    non-finite numbers); None stays None."""
    if value is None or isinstance(value, (int, float)):
        return value
    return float(value)


def metric_json(value):
    """A float for a summary: three significant digits, or aps_train's spelling when non-finite."""
    if value is None:
        return None
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return compact(value)


def summarize_run(run, out):
    """What the report needs from one run's metrics file."""
    s = {"id": run.id, "setting": run.setting, "variant": run.variant, "seed": run.seed,
         "global_batch": run.global_batch, "world": run.world, "status": "missing", "config": run_config(run)}
    records = read_records(metrics_path(out, run))
    side_path = Path(out) / "metrics" / f"{run.id}.run.json"
    if side_path.exists():
        side = json.loads(side_path.read_text())
        s["wall_seconds"] = side.get("wall_seconds")
        s["jobs"] = side.get("jobs", 1)
        if side.get("exit_code", 0) != 0:
            s["status"] = "failed"
            s["error"] = last_error(out, run)
    final = next((r for r in records if r.get("type") == "final"), None)
    if final is None:
        if s["status"] != "failed" and records:
            s["status"] = "incomplete"
        return s
    s["status"] = "ok"
    for key in ("top1", "top5", "loss", "miou", "pixel_accuracy", "step", "epoch", "skipped_steps", "seconds"):
        s[key] = final.get(key)
    train = [r for r in records if r.get("type") == "train"]
    # Steady-state step time: global batch / images per second, without the first interval
    # (thread pools, allocations and the loader's first batches warm up there).
    steady = train[1:] if len(train) > 1 else train
    s["step_seconds"] = median_or_none([run.global_batch / r["images_per_s"] for r in steady if r["images_per_s"] > 0])
    s["images_per_second"] = median_or_none([r["images_per_s"] for r in steady if r["images_per_s"] > 0])
    s["bytes_per_step"] = median_or_none([r["bytes_sent_per_step"] for r in train if r["bytes_sent_per_step"] > 0])
    exposed = [seconds for _, seconds in per_step(records, "exposed_comm_s")]
    s["exposed_comm_seconds"] = median_or_none(exposed[1:] if len(exposed) > 1 else exposed)
    # Test metric per epoch: the eval records, then the final one (the last epoch's).
    curve = [(r["epoch"], r["top1"], r["miou"]) for r in records if r.get("type") == "eval"]
    curve.append((final["epoch"], final["top1"], final["miou"]))
    s["curve"] = curve
    # hybrid_auto: the layers whose wire format the trainer widened, and when.
    s["widened"] = [[r["step"], r["name"], r["from"], r["to"]] for r in records if r.get("type") == "format"]
    # Per-layer quantisation statistics over training (flushed to zero, saturated).
    stats = layer_stats(train, compact) if run.heatmap else None
    if stats:
        s["layer_stats"] = stats
    # Model parallelism: what rank 0 sent for activations and errors per step, and each split
    # layer's relative error of them over the run (the last train record's).
    mp = [r for r in train if "mp_layers" in r]
    if mp:
        s["mp_bytes_per_step"] = median_or_none([r["mp_bytes"] for r in mp])
        s["mp_layers"] = [[layer["name"], metric_json(as_float(layer.get("activation_rel_error"))),
                           metric_json(as_float(layer.get("error_rel_error")))] for layer in mp[-1]["mp_layers"]]
    # The fidelity probe (precision.probe_interval): the run's medians over layers, and each
    # layer's mean relative error over the probed steps (layers in the model's order).
    if final.get("probe"):
        s["probe"] = {k: compact(v) if isinstance(v, float) else v for k, v in final["probe"].items()}
    probes = [r for r in records if r.get("type") == "probe"]
    if probes:
        # As the trainer's final record: a layer's mean over its probed steps where the error was
        # finite; the steps where some layer's was not are counted (probe.nonfinite_steps).
        errors = {}
        for p in probes:
            for layer in p.get("layers", []):
                value = as_float(layer.get("rel_error"))
                if value is not None and math.isfinite(value):
                    errors.setdefault(layer["name"], []).append(value)
        s["probe_layers"] = [[name, metric_json(math.fsum(v) / len(v))] for name, v in errors.items()]
    return s


def collect(sweep, runs, out, quick, command_line, full, sweep_path, results=None):
    """full: (sweep, runs) without --quick and --only, for the budget of the whole sweep. A run
    is summarised from its metrics file when this machine has it (and its summary stored), else
    taken from the results store."""
    summaries = []
    for r in runs:
        current = is_current(out, r)
        s = summarize_run(r, out) if current or not is_complete(metrics_path(out, r)) else None
        if s is not None and s["status"] == "ok":
            store_summary(results, s)
        elif (stored := stored_summary(results, r)) is not None:
            s = stored
        elif s is None:  # a finished run of another configuration: not this sweep's
            s = {"id": r.id, "setting": r.setting, "variant": r.variant, "seed": r.seed, "global_batch": r.global_batch,
                 "world": r.world, "status": "missing", "config": run_config(r)}
        summaries.append(s)
    return {
        "command": command_line,
        "sweep_file": os.path.relpath(sweep_path, ROOT) if Path(sweep_path).resolve().is_relative_to(ROOT) else str(sweep_path),
        "full_budget": budget_lines(full[0]["budget"], full[0]["settings"], full[1])[0],
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if quick else "full",
        "settings": sweep["settings"],
        "budget": sweep["budget"],
        "variants": sweep["variants"],
        # A person's reading of this sweep's committed results (a file beside the sweep file).
        "reading": str(Path(sweep_path).resolve().parent / sweep["reading"]) if sweep.get("reading") else None,
        "cores": os.cpu_count(),
        "runs": summaries,
    }


# ----------------------------------------------------------------------------- tables


def fmt_pct(values):
    """'91.23' for one seed, '91.23 ± 0.15' (sample standard deviation) for several."""
    if not values:
        return None
    mean = 100 * statistics.mean(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {100 * statistics.stdev(values):.2f}"


def fmt_bytes(b):
    if b is None:
        return "–"
    return f"{b / 1e3:,.1f}"


def fmt_ms(s):
    return "–" if s is None else f"{1e3 * s:,.0f}"


def runs_of(data, setting, variant):
    return [r for r in data["runs"] if r["setting"] == setting and r["variant"] == variant]


def cell_status(runs):
    """'' when some seed finished; otherwise why nothing did."""
    if any(r["status"] == "ok" for r in runs):
        return ""
    if any(r["status"] == "failed" for r in runs):
        return "failed¹"
    if any(r["status"] == "incomplete" for r in runs):
        return "incomplete"
    return "not run"


# One-sided 95% quantiles of Student's t (a two-sided 90% interval) for 1..30 degrees of freedom;
# beyond 30 the normal quantile is within 3%.
T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697]


def paired_interval(differences):
    """(mean, half-width of its 90% confidence interval) of paired differences; the half-width is
    None for fewer than two pairs (no spread to estimate)."""
    n = len(differences)
    mean = statistics.mean(differences)
    if n < 2:
        return mean, None
    t = T95[n - 2] if n - 1 <= len(T95) else 1.645
    return mean, t * statistics.stdev(differences) / math.sqrt(n)


def paired_differences(data, setting, variant, metric, baseline="fp32"):
    """Per seed both finished: variant's metric minus the baseline's, in points."""
    def by_seed(name):
        return {r["seed"]: r[metric] for r in runs_of(data, setting, name) if r["status"] == "ok"}
    ours, base = by_seed(variant), by_seed(baseline)
    return [100 * (ours[s] - base[s]) for s in sorted(set(ours) & set(base))]


def delta_to_baseline(data, setting, variant, metric, baseline="fp32"):
    """Points of `metric` of `variant` minus the baseline's, paired by seed: the mean over the seeds both
    finished of (variant - baseline), so a row run with seed 1 only is compared with the baseline's seed 1
    (seeds move these short runs by more than the formats do). None if they share no finished seed."""
    def by_seed(name):
        return {r["seed"]: r[metric] for r in runs_of(data, setting, name) if r["status"] == "ok"}
    ours, base = by_seed(variant), by_seed(baseline)
    seeds = sorted(set(ours) & set(base))
    if not seeds:
        return None
    return 100 * statistics.mean(ours[s] - base[s] for s in seeds)


# The equivalence margin, stated before the runs (the science issue): a row is shown equivalent
# to fp32 when two one-sided t-tests at 5% both reject a difference of 0.5 points or more, that
# is when the 90% interval of the paired differences lies inside (-0.5, +0.5).
EQUIVALENCE_MARGIN = 0.5


def tost_verdict(mean, half):
    """'equivalent', 'not shown' (the interval reaches past the margin) or '' (no interval)."""
    if half is None:
        return ""
    inside = -EQUIVALENCE_MARGIN < mean - half and mean + half < EQUIVALENCE_MARGIN
    return "equivalent" if inside else "not shown"


def skipped_cell(ok):
    """Skipped optimizer steps over the run, per seed ('0', or '657/702; 12/702')."""
    if all(not r.get("skipped_steps") for r in ok):
        return "0"
    return "; ".join(f"{r.get('skipped_steps') or 0}/{r.get('step', '?')}" for r in ok)


def metric_cells(data, setting, variant, metric, baseline):
    """(metric, delta vs the baseline variant, TOST, skipped steps, bytes/step, step ms) for one
    table cell group."""
    rs = runs_of(data, setting, variant)
    if not rs:
        return None
    status = cell_status(rs)
    if status:
        return [status] + [""] * (CELLS - 1)
    ok = [r for r in rs if r["status"] == "ok"]
    values = [r[metric] for r in ok]
    text = fmt_pct(values)
    if len(rs) > len(ok):
        text += f" ({len(ok)}/{len(rs)} seeds)"
    elif len(ok) > 1:
        text += f" (n={len(ok)})"
    delta = tost = ""
    if variant != baseline and (diffs := paired_differences(data, setting, variant, metric, baseline)):
        mean, half = paired_interval(diffs)
        delta = f"{mean:+.2f}" if half is None else f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}]"
        tost = tost_verdict(mean, half)
    bytes_ = median_or_none([r["bytes_per_step"] for r in ok if r.get("bytes_per_step")])
    step = median_or_none([r["step_seconds"] for r in ok if r.get("step_seconds")])
    return [text, delta, tost, skipped_cell(ok), fmt_bytes(bytes_), fmt_ms(step)]


CELLS = 6  # the cells metric_cells gives a setting


def contrast_table(data, metric="top1"):
    """The sweep's "contrasts": each a variant against another of the same sweep (APS against none),
    paired by seed, per setting: the mean difference in points with its 90% interval, and the two
    one-sided tests against the stated margin."""
    contrasts = data.get("contrasts", [])
    settings = [n for n, s in data["settings"].items() if any(r["setting"] == n for r in data["runs"])]
    if not contrasts or not settings:
        return []
    header = ["contrast"]
    for n in settings:
        header += [f"{n}: Δ (points)", f"TOST ±{EQUIVALENCE_MARGIN:g}", "seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c in contrasts:
        row = [c["label"]]
        for n in settings:
            diffs = paired_differences(data, n, c["variant"], metric, c["baseline"])
            if not diffs:
                row += ["", "", ""]
                continue
            mean, half = paired_interval(diffs)
            delta = f"{mean:+.2f}" if half is None else f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}]"
            row += [delta, tost_verdict(mean, half), str(len(diffs))]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def table(data, table_kind, metric, metric_name):
    settings = [n for n, s in data["settings"].items() if s["table"] == table_kind]
    settings = [n for n in settings if any(r["setting"] == n for r in data["runs"])]
    if not settings:
        return []
    baseline = "fp32"
    header = ["configuration"]
    for n in settings:
        header += [f"{n}: {metric_name} (%)", "Δ fp32", f"TOST ±{EQUIVALENCE_MARGIN:g}", "skipped steps",
                   "kB sent/step", "ms/step (shared machine)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in data["variants"]:
        cells = [metric_cells(data, n, v["name"], metric, baseline) for n in settings]
        if all(c is None for c in cells):
            continue
        row = [v["label"]]
        for c in cells:
            row += c if c is not None else [""] * CELLS
        lines.append("| " + " | ".join(row) + " |")
    return lines


def model_parallel_table(data):
    """Per variant and setting of a model-parallel sweep: the bytes rank 0 sent per step for the
    split layers' activations and errors, and each split layer's relative error of them (mean
    over seeds of each run's mean over its steps)."""
    rows = []
    for v in data["variants"]:
        for n in data["settings"]:
            runs = [r for r in runs_of(data, n, v["name"]) if r.get("status") == "ok" and r.get("mp_layers")]
            if not runs:
                continue
            cells = []
            for k, (name, _, _) in enumerate(runs[0]["mp_layers"]):
                for column in (1, 2):
                    values = [as_float(r["mp_layers"][k][column]) for r in runs]
                    values = [x for x in values if x is not None and math.isfinite(x)]
                    cells.append(f"{math.fsum(values) / len(values):.2e}" if values else "—")
            names = [layer[0] for layer in runs[0]["mp_layers"]]
            rows.append((v["label"], n, fmt_bytes(median_or_none([r["mp_bytes_per_step"] for r in runs])), names,
                         cells))
    if not rows:
        return []
    names = rows[0][3]
    header = ["activations and errors", "setting", "kB sent/step (rank 0)"]
    for name in names:
        header += [f"{name} activations rel. error", f"{name} errors rel. error"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, setting, sent, _, cells in rows:
        lines.append("| " + " | ".join([label, setting, sent] + cells) + " |")
    return lines


def probe_table(data):
    settings = [n for n, st in data["settings"].items() if st["table"] == "classification"
                and any(r.get("probe") for r in data["runs"] if r["setting"] == n)]
    if not settings:
        return []
    header = ["configuration"]
    for n in settings:
        header += [f"{n}: rel. error", "cosine", "probed steps"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in data["variants"]:
        row, any_cell = [v["label"]], False
        for n in settings:
            probes = [r["probe"] for r in runs_of(data, n, v["name"]) if r["status"] == "ok" and r.get("probe")]
            if not probes:
                row += ["", "", ""]
                continue
            any_cell = True
            rel = math.fsum(as_float(p["median_rel_error"]) for p in probes) / len(probes)
            cos = math.fsum(as_float(p["median_cosine"]) for p in probes) / len(probes)
            row += [f"{rel:.3g}", f"{cos:.4f}", str(probes[0].get("steps", "")) + nonfinite_note(probes)]
        if any_cell:
            lines.append("| " + " | ".join(row) + " |")
    return lines


def nonfinite_note(probes):
    """', k of them not finite' over the seeds' probed steps (the trainer's nonfinite_steps), or ''."""
    k = sum(int(p.get("nonfinite_steps") or 0) for p in probes)
    return f", {k} of them not finite" if k else ""


def probe_scaling_rows(data):
    """(settings in order of N, {variant: {setting: (mean rel. error, mean cosine, seeds)}}) of
    the probe_scaling settings."""
    settings = [n for n, st in data["settings"].items() if st["table"] == "probe_scaling"]
    settings.sort(key=lambda n: int(data["settings"][n]["set"]["comm.world_size"]))
    rows = {}
    for v in data["variants"]:
        for n in settings:
            probes = [r["probe"] for r in runs_of(data, n, v["name"]) if r["status"] == "ok" and r.get("probe")]
            if probes:
                rel = math.fsum(as_float(p["median_rel_error"]) for p in probes) / len(probes)
                cos = math.fsum(as_float(p["median_cosine"]) for p in probes) / len(probes)
                k = sum(int(p.get("nonfinite_steps") or 0) for p in probes)
                rows.setdefault(v["name"], {})[n] = (rel, cos, len(probes), k)
    return settings, rows


def probe_scaling_table(data):
    """Rows: the variants; columns: N; cells: probe relative error (cosine); last, the most ranks
    APS serves for the row's format (APS rows)."""
    settings, rows = probe_scaling_rows(data)
    if not rows:
        return []
    limits = data.get("aps_max_ranks", {})
    header = ["configuration"] + [f"N = {data['settings'][n]['set']['comm.world_size']}" for n in settings]
    header.append("APS serves up to")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for v in data["variants"]:
        if v["name"] not in rows:
            continue
        cells = [v["label"]]
        for n in settings:
            c = rows[v["name"]].get(n)
            seeds = len(v.get("seeds", ()))  # fewer finished than the row's seeds: say how many
            text = "" if c is None else f"{c[0]:.3g} ({c[1]:.3f})" + (f" n={c[2]}" if c[2] < seeds else "")
            cells.append(text + (f" ¹{c[3]}" if c and c[3] else ""))
        limit = limits.get(v["name"])
        cells.append("–" if limit is None else f"{limit:,.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    if any(c[3] for cells in rows.values() for c in cells.values()):
        lines += ["", "¹k: k of the seeds' probed steps had a sum that was not finite in some layer (an overflow; the "
                      "trainer skips such a step); the cell's means are over the finite ones."]
    return lines


def plot_probe_scaling(data, results_dir, name="probe_vs_ranks.png"):
    """One line per row: the probe's relative error against N (log-log); returns [name] or []."""
    settings, rows = probe_scaling_rows(data)
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    labels = {v["name"]: v["label"] for v in data["variants"]}
    for variant, cells in rows.items():
        ns = [int(data["settings"][n]["set"]["comm.world_size"]) for n in settings if n in cells]
        errors = [cells[n][0] for n in settings if n in cells]
        ax.plot(ns, errors, marker="o", label=labels[variant])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("simulated ranks N (4 images each)")
    ax.set_ylabel("probe: relative error of the reduced gradient")
    ax.set_title("Where each format breaks as N grows (small CNN, mean over seeds)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    results_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(results_dir / name, dpi=110)
    plt.close(fig)
    return [name]


# ----------------------------------------------------------------------------- plots


def plot_all(data, results_dir):
    """Writes the PNGs; returns their names. matplotlib is imported here so that a machine
    without it can still run the sweep and write the tables (--no-plots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    labels = {v["name"]: v["label"] for v in data["variants"]}
    settings = data["settings"]

    def mean_curve(rs, metric):
        by_epoch = {}
        for r in rs:
            for epoch, top1, miou in r["curve"]:
                by_epoch.setdefault(epoch, []).append(top1 if metric == "top1" else miou)
        epochs = sorted(by_epoch)
        return epochs, [100 * statistics.mean(by_epoch[e]) for e in epochs]

    def same_seeds(rows):
        """rows: {name: finished runs}. Keeps, in every row, only the seeds all rows finished, so
        that no curve is a mean over seeds beside another's single seed (seeds move these short
        runs by more than the formats do); returns (rows, text for the title)."""
        rows = {n: rs for n, rs in rows.items() if rs}
        shared = set.intersection(*({r["seed"] for r in rs} for rs in rows.values())) if rows else set()
        if not shared:
            return rows, "mean over each row's seeds"
        rows = {n: [r for r in rs if r["seed"] in shared] for n, rs in rows.items()}
        return rows, ("seed " if len(shared) == 1 else "mean over seeds ") + ", ".join(map(str, sorted(shared)))

    def style_epoch_axes(ax, title, ylabel):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)

    # Test accuracy per epoch, one figure per format family (fp32 dashed in every panel).
    families = [f for f in FAMILY_TITLES if any(v.get("family") == f for v in data["variants"])]
    for family in families:
        members = [v["name"] for v in data["variants"] if v.get("family") == family]
        panels = [n for n, s in settings.items() if s["table"] == "classification"
                  and any(r["status"] == "ok" and r["setting"] == n and r["variant"] in members for r in data["runs"])]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
        for ax, setting in zip(axes[0], panels):
            names = ([] if "fp32" in members else ["fp32"]) + members
            rows, seeds = same_seeds({n: [r for r in runs_of(data, setting, n) if r["status"] == "ok"] for n in names})
            for name, rs in rows.items():
                epochs, acc = mean_curve(rs, "top1")
                style = dict(color="0.5", linestyle="--") if name == "fp32" and family != "fp32_fp16" else {}
                ax.plot(epochs, acc, marker="o", markersize=3, label=labels[name], **style)
            style_epoch_axes(ax, f"{settings[setting]['title']} ({seeds})", "test top-1 (%)")
        fig.suptitle(f"ResNet-20 on Fashion-MNIST: {FAMILY_TITLES[family]}", fontsize=10)
        fig.tight_layout()
        name = f"accuracy_{family}.png"
        fig.savefig(results_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    def finish(ax, xlabel, ylabel, title):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(results_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    # Accuracy against bits per value: each row's paired difference to fp32 with its 90%
    # interval, at the bits it sent per gradient value (bytes per step relative to fp32's x 32,
    # so block scales and exponent exchanges count).
    cls_settings = [n for n, st in settings.items() if st["table"] == "classification"]
    plotted = [n for n in cls_settings if any(r["status"] == "ok" and r["setting"] == n and r["variant"] != "fp32"
                                              for r in data["runs"])]
    if plotted:
        fig, axes = plt.subplots(1, len(plotted), figsize=(5.6 * len(plotted), 4.2), squeeze=False)
        for ax, setting in zip(axes[0], plotted):
            base = median_or_none([r["bytes_per_step"] for r in runs_of(data, setting, "fp32")
                                   if r["status"] == "ok" and r.get("bytes_per_step")])
            for i, v in enumerate(data["variants"]):
                if v["name"] == "fp32" or not base:
                    continue
                diffs = paired_differences(data, setting, v["name"], "top1")
                sent = median_or_none([r["bytes_per_step"] for r in runs_of(data, setting, v["name"])
                                       if r["status"] == "ok" and r.get("bytes_per_step")])
                if not diffs or not sent:
                    continue
                mean, half = paired_interval(diffs)
                bits = 32.0 * sent / base
                ax.errorbar([bits], [mean], yerr=[[half or 0.0], [half or 0.0]], fmt="osD^v<>pP*Xh"[i % 12], capsize=3,
                            label=f"{v['label']} (n={len(diffs)})")
            ax.axhline(0.0, color="0.5", linestyle="--", linewidth=1)
            ax.set_xscale("log", base=2)
            finish(ax, "bits sent per gradient value (relative to fp32's bytes)",
                   "top-1 minus fp32's, same seed (points)", f"{settings[setting]['title']}: mean and 90% interval")
        save(fig, "accuracy_vs_bits.png")

    # The probe's relative error per layer (first seed of each row), one panel per setting.
    probed = [n for n in cls_settings
              if any(r.get("probe_layers") and r["variant"] != "fp32" for r in data["runs"] if r["setting"] == n)]
    if probed:
        fig, axes = plt.subplots(1, len(probed), figsize=(6.0 * len(probed), 4.2), squeeze=False)
        for ax, setting in zip(axes[0], probed):
            for v in data["variants"]:
                ok = sorted((r for r in runs_of(data, setting, v["name"]) if r["status"] == "ok" and r.get("probe_layers")),
                            key=lambda r: r["seed"])
                if not ok or v["name"] == "fp32":
                    continue
                errors = [max(e, 1e-8) for _, e in ok[0]["probe_layers"]]
                ax.plot(range(len(errors)), errors, marker=".", markersize=3, linewidth=1, label=v["label"])
            ax.set_yscale("log")
            finish(ax, "layer (parameter tensor, in the model's order)", "relative error of the reduced gradient",
                   f"{settings[setting]['title']}: fidelity probe, mean over probed steps")
        save(fig, "probe_layers.png")

    # Segmentation mIoU per epoch.
    seg_settings = [n for n, s in settings.items() if s["table"] == "segmentation"]
    for setting in seg_settings:
        rs_all = [r for r in data["runs"] if r["setting"] == setting and r["status"] == "ok"]
        if not rs_all:
            continue
        fig, ax = plt.subplots(figsize=(5.2, 3.8))
        rows, seeds = same_seeds({v["name"]: [r for r in rs_all if r["variant"] == v["name"]] for v in data["variants"]})
        for name, rs in rows.items():
            epochs, miou = mean_curve(rs, "miou")
            ax.plot(epochs, miou, marker="o", markersize=3, label=labels[name])
        style_epoch_axes(ax, f"{settings[setting]['title']} ({seeds})", "test mIoU (%)")
        fig.tight_layout()
        name = f"miou_{setting}.png"
        fig.savefig(results_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    # Per-layer fraction of gradient values flushed to zero / saturated, without and with APS.
    groups = sorted({v["heatmap"] for v in data["variants"] if v.get("heatmap")})
    for setting in settings:
        for group in groups:
            members = [v["name"] for v in data["variants"] if v.get("heatmap") == group]
            rs = []
            for name in members:
                ok = sorted((r for r in runs_of(data, setting, name) if r["status"] == "ok" and r.get("layer_stats")),
                            key=lambda r: r["seed"])
                if ok:
                    rs.append(ok[0])
            if not rs:
                continue
            fig, axes = plt.subplots(2, len(rs), figsize=(1.5 + 4.5 * len(rs), 9.0), squeeze=False,
                                     layout="constrained")
            image = None
            for col, r in enumerate(rs):
                st = r["layer_stats"]
                for row, key in enumerate(("flushed", "saturated")):
                    image = draw_layer_heatmap(axes[row][col], st, key, f"{labels[r['variant']]}: {key}",
                                               show_names=col == 0)
            fig.colorbar(image, ax=axes, shrink=0.5, label="fraction of the layer's gradient values")
            fig.suptitle(f"{settings[setting]['title']}: {group} gradients per layer (rank 0, before the all-reduce)",
                         fontsize=9)
            name = f"heatmap_{setting}_{group}.png"
            fig.savefig(results_dir / name, dpi=90)
            plt.close(fig)
            written.append(name)
    return written


# ----------------------------------------------------------------------------- the report


LITERATURE = """\
## Our numbers beside the literature's

| claim | source | their setup | ours (this sweep) |
|---|---|---|---|
| 8-bit gradients with APS lose < 0.05% accuracy | Han, Demmel, You, ISC 2021 (arXiv 1911.08907), abstract | ResNet-18/CIFAR-10 and ResNet-50/ImageNet, many (emulated) nodes | {aps8} |
| 8-bit gradients: AlexNet top-5 error 18.65% vs 18.55% (32-bit) | Dettmers, ICLR 2016 (arXiv 1511.04561) | AlexNet/ImageNet, dynamic-tree 8-bit | {dettmers} |
| FP8 training: ResNet-50 top-1 76.71% (bf16) -> 76.76% (FP8) | Micikevicius et al., "FP8 Formats for Deep Learning" (arXiv 2209.05433) | ResNet-50/ImageNet, E4M3 forward / E5M2 gradients | {fp8} |

The sweep's setups are far smaller (ResNet-20 on a Fashion-MNIST subset, a few epochs on CPUs),
so the differences it measures carry seed noise ({noise}; the ± columns);
a difference smaller than the spread is no difference. The shipped configurations below run
the literature's setups at their scale, on GPUs or many CPU nodes with the real datasets
(`mpirun -np N build/bin/aps_train --config FILE`); none of them was run for this report.

| config | setup | expected (literature) |
|---|---|---|
| `configs/resnet50_fp8.yaml` | APS paper: ResNet-50/ImageNet, 32 ranks x 256 (global 8192), Nesterov, peak LR 3.2, 90 epochs, E5M2 + APS | ~76% top-1, within 0.05% of fp32 (`--set precision.format=fp32` for the baseline) |
| `configs/resnet50_fp8.yaml --set precision.format=e4m3 --set precision.scaling=none` | FP8 formats paper's comparison, gradients only in FP8 (its forward pass in FP8 is not emulated) | 76.71 -> 76.76 top-1 for full FP8 training; gradient-only FP8 should be at least as close |
| `configs/resnet50_fp8.yaml --set precision.format=dettmers_dynamic/block256 --set precision.scaling=none` | Dettmers' dynamic-tree 8-bit type on ResNet-50 (the repository ships no AlexNet) | within ~0.1% of fp32 (his AlexNet: 18.65% vs 18.55% top-5 error) |
| `configs/cifar10_resnet18_aps.yaml` | APS artifact: ResNet-18/CIFAR-10, 8 ranks x 512, 100 epochs, warm-up 0.1 -> 1.6, IEEE-like E4M3 + APS | ~94-95% top-1, within 0.05% of fp32 |
| `configs/cityscapes_fcn_r50_d8_fp8.yaml` | APS artifact's segmentation: FCN-R50-D8 on Cityscapes, 8 ranks, E4M3 + APS, 80k steps | mIoU close to mmsegmentation's fp32 FCN-R50-D8 (~72-74%) |
"""


def literature_numbers(data):
    def describe(*pairs):
        texts = []
        for variant, name in pairs:
            settings = [n for n, st in data["settings"].items() if st["table"] == "classification"]
            parts = [f"{setting} {d:+.2f}" for setting in settings
                     if (d := delta_to_baseline(data, setting, variant, "top1")) is not None]
            if parts:
                texts.append(f"{name}: " + ", ".join(parts))
        return "; ".join(texts) + " points of top-1 vs fp32" if texts else "not run"

    def noise():
        spreads = []
        for setting, s in data["settings"].items():
            if s["table"] != "classification":
                continue
            for v in data["variants"]:
                top1 = [r["top1"] for r in runs_of(data, setting, v["name"]) if r["status"] == "ok"]
                if len(top1) >= 2:
                    spreads.append(100 * statistics.stdev(top1))
        if not spreads:
            return "not measured: no row ran with two seeds"
        return (f"the sample standard deviation over seeds of the {len(spreads)} rows run with two or more is "
                f"{min(spreads):.2f} to {max(spreads):.2f} points of top-1, median {statistics.median(spreads):.2f}")

    return {
        "noise": noise(),
        "aps8": describe(("e4m3_aps", "e4m3 + APS"), ("e4m3_ieee_aps", "e4m3 (IEEE-like) + APS"),
                         ("e5m2_aps", "e5m2 + APS")),
        "dettmers": describe(("dettmers_dynamic", "dynamic tree"), ("dettmers_linear", "linear")),
        "fp8": describe(("e5m2", "e5m2"), ("e4m3", "e4m3"), ("fp8lm", "e4m3 + FP8-LM scaler")),
    }


def budget_model(budget, settings, runs):
    """Per setting: (runs, train images, test images, CPU-seconds per run), from sweep.json's budget."""
    rows = {}
    for name, setting in settings.items():
        n = sum(1 for r in runs if r.setting == name)
        if n == 0:
            continue
        keys = setting["set"]
        epochs = int(keys.get("epochs", 1))
        train = int(keys["data.train_samples"]) * epochs
        if "max_steps" in keys:  # a run cut short (the probe sweep): its steps' images
            train = min(train, int(keys["max_steps"]) * int(keys["comm.world_size"]) * int(keys["data.batch_size"]))
        evaluations = epochs if int(keys.get("eval.interval_epochs", 1)) != 0 else 1  # 0: at the end only
        test = int(keys["data.test_samples"]) * evaluations
        rate = budget["train_images_per_cpu_second"][name]
        cpu = budget["startup_cpu_seconds"] + (train + budget["eval_cost"] * test) / rate
        rows[name] = (n, train, test, rate, cpu)
    return rows


def budget_lines(budget, settings, runs):
    model = budget_model(budget, settings, runs)
    cores = budget["cores"]
    lines = ["| setting | runs | train images/run | test images/run | train images per CPU-s | CPU-s/run | CPU-s |",
             "|---|---|---|---|---|---|---|"]
    total = 0.0
    for name, (n, train, test, rate, cpu) in model.items():
        total += n * cpu
        lines.append(f"| {name} | {n} | {train:,} | {test:,} | {rate} | {cpu:,.0f} | {n * cpu:,.0f} |")
    wall = total / cores
    lines += ["", f"Total {total:,.0f} CPU-s; on {cores} cores with `--jobs {cores}` (one thread per run): "
              f"{wall:,.0f} s = {wall / 3600:.2f} h (limit {budget['hours']} h)."]
    return lines, wall


def budget_section(data):
    budget = data["budget"]
    lines = ["## Budget", ""]
    lines.append(
        f"The sweep is sized to finish within {budget['hours']} hours on {budget['cores']} cores. A run costs "
        f"{budget['startup_cpu_seconds']} CPU-s of start-up plus (train images + {budget['eval_cost']} x test "
        "images) / (train images per CPU-second); an evaluation image costs about a third of a training image "
        "(forward only). The rates, as the sweep file's `budget` states them: "
        + " ".join(budget.get("comment", [])) + " The full sweep's training subsets, epochs and test subsets were "
        "chosen to fit:")
    lines.append("")
    lines += data["full_budget"]
    lines.append("")
    measured = [r for r in data["runs"] if r["status"] == "ok" and r.get("wall_seconds")]
    if measured:
        jobs = sorted({r.get("jobs", 1) for r in measured})
        lines.append(f"Measured in this report's runs (`--jobs {'/'.join(map(str, jobs))}`, on a machine "
                     f"with {data['cores']} cores):")
        lines.append("")
        lines.append("| setting | runs measured | mean wall s/run | median images/s | projected wall for all runs (s) |")
        lines.append("|---|---|---|---|---|")
        total = 0.0
        for name in data["settings"]:
            rs = [r for r in data["runs"] if r["setting"] == name]
            walls = [r["wall_seconds"] for r in measured if r["setting"] == name]
            if not walls:
                continue
            ips = median_or_none([r["images_per_second"] for r in measured
                                  if r["setting"] == name and r.get("images_per_second")])
            setting_wall = statistics.mean(walls) * len(rs) / max(jobs)
            total += setting_wall
            lines.append(f"| {name} | {len(walls)} of {len(rs)} | {statistics.mean(walls):,.0f} | "
                         f"{f'{ips:,.0f}' if ips else '–'} | {setting_wall:,.0f} |")
        lines += ["", f"Whole sweep at these run times: {total:,.0f} s = {total / 3600:.2f} h.", ""]
    return lines


def section_lines(section):
    """A further sweep's part of the page (the sweep file's "sections"): its title and note, its
    classification, segmentation and probe tables, and the reading written for it."""
    md = [f"## {section['title']}", ""]
    if section.get("note"):
        md += [section["note"], ""]
    md += [f"Runs: `python3 tools/reproduce/reproduce.py --sweep {section['sweep_file']}` (its summaries in the same "
           "results store; its columns as above).", ""]
    cls = (table(section, "classification", "top1", "top-1") + table(section, "segmentation", "miou", "mIoU")
           + probe_scaling_table(section))
    md += (cls + [""]) if cls else ["No run of this sweep has finished yet.", ""]
    for image in section.get("images", []):
        md += [f"![{image}](results/{image})", ""]
    contrasts = contrast_table(section)
    if contrasts:
        md += ["Each contrast paired by seed (the first variant's top-1 minus the second's, in points, with its 90% "
               "interval; TOST as above):", ""] + contrasts + [""]
    probe = probe_table(section)
    if probe:
        md += ["Its fidelity probe (as below):", ""] + probe + [""]
    split = model_parallel_table(section)
    if split:
        md += ["The split layers' messages (rank 0's bytes per step for activations and errors; each layer's relative "
               "error ||decode(encode(v)) - v|| / ||v|| of its activations and of its errors, fc1's errors none: its "
               "input is the images):", ""] + split + [""]
    reading = Path(section["reading"]) if section.get("reading") else None
    if section["mode"] == "full" and reading is not None and reading.exists():
        md += [reading.read_text().rstrip(), ""]
    return md


def write_report(data, docs_dir, plots):
    docs_dir = Path(docs_dir)
    results_dir = docs_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "summary.json").write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    images = plot_all(data, results_dir) if plots else []
    for section in data.get("sections", []):
        section["images"] = plot_probe_scaling(section, results_dir) if plots else []

    settings = data["settings"]
    md = ["# Results: low-precision gradient communication on Fashion-MNIST", ""]
    md.append(f"Generated by `{data.get('command', 'python3 tools/reproduce/reproduce.py')}` "
              f"on {data['generated']} from the sweep in `{data.get('sweep_file', 'tools/reproduce/sweep.json')}`; "
              "`--report-only` regenerates this page from the metrics files, or from the committed summaries of the runs "
              "(`results/runs/ID.json`).")
    md.append("")
    if data["mode"] == "quick":
        md += ["**These are `--quick` sizes** (a few hundred training images, a couple of epochs, a few hundred test "
               "images): they exercise the pipeline and every configuration, and their accuracies say nothing about "
               "the formats. The full sweep (`python3 tools/reproduce/reproduce.py --jobs 2`, see Budget for its time on 2 "
               "cores) replaces this page with the real numbers.", ""]
    md.append("## Setup")
    md.append("")
    for name, s in settings.items():
        keys = s["set"]
        desc = ", ".join(f"`{k}={yaml_value(v)}`" for k, v in keys.items() if not k.startswith("logging")
                         and k not in ("precision.stats_window",))
        world, batch = int(keys["comm.world_size"]), int(keys["data.batch_size"])
        md.append(f"- **{name}**: {s['title']}. {s.get('note', '')} This report: {world} ranks x {batch} = global "
                  f"batch {world * batch}; base `{s['config']}` with {desc}.")
    md.append("")
    md.append("Every run is one `aps_train` process simulating all ranks (`comm.backend=sim`: the same collective "
              "schedule and bytes as `mpirun`). *kB sent/step*: bytes one rank sends per optimizer step "
              "(the largest over ranks, all buckets and the APS exponent exchange), in 1000s. *ms/step (shared "
              "machine)*: median wall time of a training step (all simulated ranks' forward, backward, encode, "
              "all-reduce and update) after the first logging interval, measured while the machine also ran other "
              "runs and builds: contended time, not a speed comparison between rows (aps_bench_comm and "
              "docs/PERFORMANCE.md measure speed). *skipped steps*: optimizer steps a non-finite gradient skipped, "
              "per seed. *TOST ±0.5*: two one-sided t-tests at 5% against a margin of 0.5 points, fixed before the "
              "runs: `equivalent` when the 90% interval of Δ fp32 lies inside ±0.5, `not shown` when it reaches "
              "past it (a row not separated from fp32 is not thereby shown equivalent). *± x*: sample standard deviation over "
              "seeds (n runs). *Δ fp32*: difference to fp32 in points, paired by seed (the mean over the seeds both ran of this row's result minus fp32's with the same seed), with its 90% confidence interval in brackets where two or more seeds pair up (Student's t on the paired differences; an interval that contains 0 does not separate the row from fp32).")
    md.append("")

    cls = table(data, "classification", "top1", "top-1")
    if cls:
        md += ["## Classification: ResNet-20, Fashion-MNIST, final test top-1", ""] + cls + [""]
    for section in data.get("sections", []):
        md += section_lines(section)
    probe = probe_table(data)
    if probe:
        md += ["## Fidelity probe: how much of the gradient each row loses", "",
               "Every `precision.probe_interval` steps each bucket is also summed exactly (fp32, rank order) and each "
               "layer's low-precision sum is compared with it: *rel. error* = ||lp - exact|| / ||exact||, *cosine* "
               "= cos(lp, exact). Per run: each layer's mean over the probed steps, then the median over layers; "
               "the cell is the mean over the row's seeds. Deterministic given the run, so it ranks rows whose "
               "accuracies differ by less than their seed spread (docs/ALGORITHMS.md, Fidelity probe).", ""]
        md += probe + [""]
    seg = table(data, "segmentation", "miou", "mIoU")
    if seg:
        md += ["## Segmentation: small FCN, Fashion-MNIST segmentation, final test mIoU", ""] + seg + [""]
    widened = [r for r in data["runs"] if r.get("widened")]
    if widened:
        md += ["Layers whose format `hybrid_auto` widened (count, and the steps at which it happened):", ""]
        for r in widened:
            groups = {}
            for step, _, before, after in r["widened"]:
                groups.setdefault(f"{before} -> {after}", []).append(step)
            text = "; ".join(f"{len(steps)} x {change} (steps {min(steps)}-{max(steps)})"
                             for change, steps in groups.items())
            md.append(f"- `{r['id']}`: {text}")
        md.append("")
    failed = [r for r in data["runs"] if r["status"] == "failed"]
    if failed:
        md.append("¹ Failed runs (the metrics files and logs are under the sweep's `--out` directory):")
        md.append("")
        for r in failed:
            md.append(f"- `{r['id']}`: {r.get('error', '')}")
        md.append("")

    reading = Path(data["reading"]) if data.get("reading") else READING
    if data["mode"] == "full" and reading.exists():
        # A person's reading of the committed full sweep; it names the sweep it was written for, so a
        # regenerated page with other numbers shows the mismatch instead of silently keeping old prose.
        md += [reading.read_text().rstrip(), ""]
    if data["mode"] == "full" and PYTORCH.exists():
        md += [PYTORCH.read_text().rstrip(), ""]

    if images:
        md += ["## Plots", ""]
        for name in images:
            md.append(f"![{name}](results/{name})")
            md.append("")
        md.append("Heat maps: the fraction of each layer's gradient values (local rank 0, after any scaling, before "
                  "the all-reduce) that quantisation flushes to zero or saturates, per logging interval "
                  "(`precision.stats_window` steps); log colour scale, values below 1e-5 shown as 1e-5.")
        md.append("")

    md += budget_section(data)
    md.append(LITERATURE.format(**literature_numbers(data)))
    md += ["## Regenerating", "",
           "```sh",
           "cmake --build build --target aps_train",
           "python3 tools/reproduce/reproduce.py --jobs 2         # every run, then this page (resumable)",
           f"python3 tools/reproduce/reproduce.py --only '{next(iter(data['settings']))}-*'   # one setting",
           "python3 tools/reproduce/reproduce.py --report-only    # this page from existing metrics",
           "python3 tools/reproduce/reproduce.py --quick          # minutes; writes under out/reproduce-quick",
           "```", "",
           "Runs are named `SETTING-VARIANT-sSEED`; each writes `out/reproduce/metrics/ID.jsonl` "
           "(aps_train's JSON-lines metrics) and `out/reproduce/logs/ID.log`. "
           f"A new format or configuration is one entry in `{data.get('sweep_file', 'tools/reproduce/sweep_scale.json')}` "
           "(see `docs/NEW_FORMATS.md`).", ""]
    (docs_dir / "RESULTS.md").write_text("\n".join(md))
    return images


# ----------------------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a reduced sweep (minutes) for testing: the quick sizes, and the quick runs unless --only")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1: each run uses every core)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="only runs whose id (SETTING-VARIANT-sSEED) matches a glob; repeatable or comma-separated")
    p.add_argument("--out", help="metrics and logs (default out/reproduce, or out/reproduce-quick with --quick)")
    p.add_argument("--docs", help="where RESULTS.md and results/*.png go (default docs/, or OUT/docs with --quick)")
    p.add_argument("--aps-train", default=str(DEFAULT_APS_TRAIN), help="the aps_train binary")
    p.add_argument("--sweep", default=str(DEFAULT_SWEEP), help="the sweep definition (JSON)")
    p.add_argument("--results", help="the store of finished runs' summaries, one ID.json each (default "
                   "DOCS/results/runs; commit it): runs found there are not rerun")
    p.add_argument("--report-only", action="store_true", help="write the docs from existing metrics; run nothing")
    p.add_argument("--list", action="store_true", help="print the runs and their commands; run nothing")
    p.add_argument("--check", action="store_true",
                   help="aps_train --dry-run every selected run (config, data, model, formats); train nothing")
    p.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be >= 1")
    if args.out is None:
        args.out = str(ROOT / "out" / ("reproduce-quick" if args.quick else "reproduce"))
    if args.docs is None:
        args.docs = str(Path(args.out) / "docs") if args.quick else str(ROOT / "docs")
    if args.results is None:
        args.results = str(Path(args.docs) / "results" / "runs")
    return args


def check_runs(runs, args):
    """aps_train --dry-run for each run: a sweep of hours should not find a bad key in its last run."""
    if not Path(args.aps_train).exists():
        raise SweepError(f"aps_train not found at '{args.aps_train}'")
    failed = 0
    for r in runs:
        cmd = command(r, args.aps_train, args.out, 0) + ["--dry-run"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            failed += 1
            lines = (p.stderr or p.stdout).strip().splitlines()
            print(f"{r.id}: FAILED (exit {p.returncode}): {lines[-1] if lines else ''}", flush=True)
        else:
            print(f"{r.id}: ok", flush=True)
    print(f"check: {len(runs) - failed} of {len(runs)} runs pass aps_train --dry-run", flush=True)
    return 1 if failed else 0


def command_line(args):
    """The command that reproduces this sweep's runs, for the report's first line."""
    words = ["python3", "tools/reproduce/reproduce.py"]
    if args.quick:
        words.append("--quick")
    if args.jobs != 1:
        words += ["--jobs", str(args.jobs)]
    for pattern in args.only:
        words += ["--only", shlex.quote(pattern)]
    if Path(args.sweep).resolve() != DEFAULT_SWEEP:
        words += ["--sweep", args.sweep]
    return " ".join(words)


def aps_limits(variants, aps_formats):
    """{variant: the most ranks APS serves for its format} for the APS rows, from `aps_formats
    info` (aps's own ApsScaler::maxRanks); empty where that tool is not there."""
    limits = {}
    for v in variants:
        keys = v.get("set", {})
        if keys.get("precision.scaling") != "aps" or not Path(aps_formats).exists():
            continue
        p = subprocess.run([str(aps_formats), "info", str(keys["precision.format"])], capture_output=True, text=True)
        for line in p.stdout.splitlines():
            if line.startswith("aps_max_ranks:"):
                limits[v["name"]] = float(line.split(":", 1)[1])
    return limits


def collect_sections(sweep, args):
    """The sweeps whose tables join this page (the sweep file's "sections": files beside it, each
    with a "title"), from the results store: their runs are run with --sweep FILE."""
    sections = []
    for name in sweep.get("sections", []):
        path = Path(args.sweep).resolve().parent / name
        other, runs = load_sweep(path, False)
        section = collect(other, runs, args.out, False, "", (other, runs), path, args.results)
        section["title"] = other.get("title", name)
        section["note"] = other.get("note", "")
        section["contrasts"] = other.get("contrasts", [])
        section["aps_max_ranks"] = aps_limits(other["variants"], Path(args.aps_train).parent / "aps_formats")
        sections.append(section)
    return sections


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        sweep, runs = load_sweep(args.sweep, args.quick, args.only)
        runs = select(runs, args.only)
        if args.list:
            for r in runs:
                print(f"{r.id}: " + " ".join(shlex.quote(c) for c in command(r, args.aps_train, args.out, 0)))
            lines, _ = budget_lines(sweep["budget"], sweep["settings"], runs)
            print("\n".join(["", "budget model (sweep.json):"] + lines))
            return 0
        if args.check:
            return check_runs(runs, args)
        if not args.no_plots:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                # Debian's python3-matplotlib belongs to /usr/bin/python3; another python3 may be
                # first on PATH (pyenv, a virtual environment).
                system = "/usr/bin/python3"
                if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system):
                    os.execv(system, [system, str(Path(__file__).resolve())] + (sys.argv[1:] if argv is None else argv))
                raise SweepError("matplotlib is missing: apt-get install python3-matplotlib "
                                 "(run with /usr/bin/python3), or pass --no-plots")
        failed = []
        if args.report_only:
            data = collect(sweep, runs, args.out, args.quick, command_line(args), load_sweep(args.sweep, False),
                           args.sweep, args.results)
        else:
            if not Path(args.aps_train).exists():
                raise SweepError(f"aps_train not found at '{args.aps_train}': build it "
                                 "(cmake --build build --target aps_train) or pass --aps-train PATH")
            start = time.monotonic()
            failed = run_sweep(runs, args)
            print(f"sweep: {len(runs)} runs in {time.monotonic() - start:.0f} s", flush=True)
            data = collect(sweep, runs, args.out, args.quick, command_line(args), load_sweep(args.sweep, False),
                           args.sweep, args.results)
        data["sections"] = collect_sections(sweep, args)
        images = write_report(data, args.docs, not args.no_plots)
        print(f"wrote {Path(args.docs) / 'RESULTS.md'} and {len(images)} plots in {Path(args.docs) / 'results'}")
        if failed:
            print(f"reproduce: {len(failed)} runs failed: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    except SweepError as e:
        print(f"reproduce: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
