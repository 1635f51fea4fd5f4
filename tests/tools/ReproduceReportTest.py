#!/usr/bin/env python3
"""reproduce.py's tables from synthetic run summaries (no aps_train): the equivalence test
against the stated margin, the skipped-steps column, a further sweep's section, and non-finite
probe values read as the trainer writes them ("inf", "nan")."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("reproduce", ROOT / "tools" / "reproduce" / "reproduce.py")
reproduce = importlib.util.module_from_spec(spec)
sys.path.insert(0, str(ROOT / "tools" / "reproduce"))
spec.loader.exec_module(reproduce)


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def run(variant, seed, top1, skipped=0, probe=None):
    return {"id": f"s8-{variant}-s{seed}", "setting": "s8", "variant": variant, "seed": seed, "status": "ok",
            "top1": top1, "skipped_steps": skipped, "step": 700, "bytes_per_step": 1000.0, "step_seconds": 0.5,
            "probe": probe}


def data(runs, variants):
    return {"settings": {"s8": {"table": "classification"}}, "variants": [{"name": v, "label": v} for v in variants],
            "runs": runs, "mode": "full"}


def main():
    # The margin is 0.5 points: an interval inside it is equivalence, one reaching past is not.
    check(reproduce.tost_verdict(0.1, 0.3) == "equivalent", "[-0.2, 0.4] is inside ±0.5")
    check(reproduce.tost_verdict(0.1, 0.45) == "not shown", "[-0.35, 0.55] reaches past +0.5")
    check(reproduce.tost_verdict(-0.9, 0.2) == "not shown", "a separated loss is not equivalent")
    check(reproduce.tost_verdict(0.1, None) == "", "one seed has no interval")

    fp32 = [run("fp32", s, t) for s, t in ((1, 0.900), (2, 0.905), (3, 0.902))]
    close = [run("close", s, t) for s, t in ((1, 0.901), (2, 0.906), (3, 0.9025))]
    lossy = [run("lossy", s, t) for s, t in ((1, 0.85), (2, 0.80), (3, 0.88))]
    d = data(fp32 + close + lossy, ["fp32", "close", "lossy"])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in reproduce.table(d, "classification", "top1", "top-1")}
    header = reproduce.table(d, "classification", "top1", "top-1")[0]
    check("TOST ±0.5" in header and "skipped steps" in header and "ms/step (shared machine)" in header,
          f"header names the columns: {header}")
    check("| equivalent |" in rows["close"], f"a row within 0.1 of fp32 on every seed is equivalent: {rows['close']}")
    check("| not shown |" in rows["lossy"], f"a row 5 points off is not: {rows['lossy']}")
    check("| 0/700; 0/700; 0/700 |" not in rows["close"] and "| 0 |" in rows["close"], "no skipped step reads 0")
    lossy_skipped = [run("lossy", s, 0.85, skipped=k) for s, k in ((1, 657), (2, 0), (3, 3))]
    d = data(fp32 + lossy_skipped, ["fp32", "lossy"])
    line = [l for l in reproduce.table(d, "classification", "top1", "top-1") if l.startswith("| lossy")][0]
    check("657/700; 0/700; 3/700" in line, f"skipped steps per seed: {line}")

    # Non-finite probe medians, as the trainer's final record writes them, are shown, not dropped.
    probed = [run("fp32", 1, 0.9, probe={"median_rel_error": 0.0, "median_cosine": 1.0, "steps": 3}),
              run("e3m0", 1, 0.1, probe={"median_rel_error": "inf", "median_cosine": "nan", "steps": 3})]
    lines = reproduce.probe_table(data(probed, ["fp32", "e3m0"]))
    e3m0 = [l for l in lines if l.startswith("| e3m0")][0]
    check("inf" in e3m0 and "nan" in e3m0, f"non-finite probe values are shown: {e3m0}")
    check(reproduce.metric_json(float("inf")) == "inf" and reproduce.metric_json(0.12345) == 0.123,
          "summaries spell non-finite values as the trainer does")

    # A further sweep's section: its title, note, table and the command that runs it.
    section = data(fp32 + close, ["fp32", "close"])
    section.update(title="The artifact's reduction", note="Under allgather.", sweep_file="tools/reproduce/x.json",
                   reading=None)
    md = "\n".join(reproduce.section_lines(section))
    check(md.startswith("## The artifact's reduction") and "Under allgather." in md and "--sweep tools/reproduce/x.json"
          in md and "| close |" in md, f"the section: {md}")
    # A contrast between two of the section's variants, paired by seed, with its interval and TOST.
    section["contrasts"] = [{"label": "close minus fp32", "variant": "close", "baseline": "fp32"}]
    lines = reproduce.contrast_table(section)
    check(lines[0] == "| contrast | s8: Δ (points) | TOST ±0.5 | seeds |", f"contrast columns: {lines[0]}")
    check(lines[2].startswith("| close minus fp32 | +0.08 [") and lines[2].endswith("| equivalent | 3 |"),
          f"close is +0.1, +0.1, +0.05 points over fp32: {lines[2]}")
    check("close minus fp32" in "\n".join(reproduce.section_lines(section)), "the section shows its contrasts")
    empty = data([], ["fp32"])
    empty.update(title="T", sweep_file="x.json", reading=None)
    check("No run of this sweep has finished yet." in "\n".join(reproduce.section_lines(empty)), "an empty section says so")
    # Probe error against N: one column per rank count in order of N, the APS limit last.
    settings = {f"n{n}": {"table": "probe_scaling", "set": {"comm.world_size": n}} for n in (64, 8)}
    runs = [{"id": f"{st}-e3m0_aps-s1", "setting": st, "variant": "e3m0_aps", "seed": 1, "status": "ok",
             "probe": {"median_rel_error": err, "median_cosine": cos, "steps": 6}}
            for st, err, cos in (("n8", 0.45, 0.9), ("n64", "inf", "nan"))]
    runs[0]["probe"]["nonfinite_steps"] = 2
    scaling = {"settings": settings, "variants": [{"name": "e3m0_aps", "label": "e3m0 + APS", "seeds": [1, 2]}], "runs": runs,
               "aps_max_ranks": {"e3m0_aps": 16.0}}
    lines = reproduce.probe_scaling_table(scaling)
    check(lines[0] == "| configuration | N = 8 | N = 64 | APS serves up to |", f"columns by N: {lines[0]}")
    check(lines[2] == "| e3m0 + APS | 0.45 (0.900) n=1 ¹2 | inf (nan) n=1 | 16 |", f"cells: {lines[2]}")
    check(lines[-1].startswith("¹k: k of the seeds' probed steps"), f"the footnote: {lines[-1]}")
    print("reproduce report: ok")


if __name__ == "__main__":
    main()
