#!/usr/bin/python3
"""What a run leaves for other tools, read back independently of aps: the TensorBoard event
file (TFRecord framing checked with Debian's python3-crc32c, the Event protocol buffers decoded
here by hand) holds every train and final number of metrics.jsonl; `aps_plot RUN --csv` writes
every record as a spreadsheet row; `aps_plot RUN` draws RUN/metrics.png."""

import argparse
import csv
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import crc32c

ROOT = Path(__file__).resolve().parents[2]


def masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, value) of a protocol buffer message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        else:
            raise AssertionError(f"wire type {wire}")
        yield number, wire, value


def read_events(path):
    """[(step, file_version or None, [(tag, value)])] of a TFRecord event file, CRCs checked."""
    data = path.read_bytes()
    events, i = [], 0
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert length_crc == masked(header), "length CRC"
        body = data[i + 12:i + 12 + length]
        (body_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        assert body_crc == masked(body), "record CRC"
        i += 16 + length
        step, version, scalars = 0, None, []
        for number, wire, value in fields(body):
            if number == 2:
                step = value
            elif number == 3:
                version = value.decode()
            elif number == 5:
                for n, _, summary_value in fields(value):
                    assert n == 1
                    tag = scalar = None
                    for m, w, v in fields(summary_value):
                        if m == 1:
                            tag = v.decode()
                        elif m == 2 and w == 5:
                            (scalar,) = struct.unpack("<f", v)
                    scalars.append((tag, scalar))
        events.append((step, version, scalars))
    return events


def as_float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--aps-train", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    args.aps_train = str(Path(args.aps_train).resolve())
    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run = work / "run"
    done = subprocess.run([args.aps_train, "--config", str(ROOT / "configs/fmnist_resnet20_fp32.yaml"),
                           "--set", "comm.backend=sim", "--set", "comm.world_size=2", "--set", "data.batch_size=8",
                           "--set", "data.train_samples=64", "--set", "data.test_samples=32", "--set", "max_steps=4",
                           "--set", "threads=1", "--set", "logging.interval=1", "--set", "logging.progress=false",
                           "--set", f"output_dir={run}"], capture_output=True, text=True, cwd=work)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]

    files = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    events = read_events(files[0])
    assert events[0][1] == "brain.Event:2", events[0]
    scalars = {}
    for step, _, values in events[1:]:
        for tag, value in values:
            scalars[(tag, step)] = value
    train = [r for r in records if r["type"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4], train
    for r in train:
        for key in ("loss", "lr", "bytes_sent_per_step"):
            assert scalars[(f"train/{key}", r["step"])] == as_float32(r[key]), (key, r)
    final = next(r for r in records if r["type"] == "final")
    assert scalars[("final/top1", 4)] == as_float32(final["top1"]), final

    # Every record as a CSV row, read back with Python's csv module.
    plot = Path(args.aps_train).parent / "aps_plot"
    out = work / "metrics.csv"
    done = subprocess.run([sys.executable, str(plot), str(run), "--csv", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(records), (len(rows), len(records))
    assert [row["type"] for row in rows] == [r["type"] for r in records]
    train_rows = [row for row in rows if row["type"] == "train"]
    assert [float(row["loss"]) for row in train_rows] == [r["loss"] for r in train], train_rows
    assert float(next(row for row in rows if row["type"] == "final")["top1"]) == final["top1"]

    # A run folder alone draws its metrics.png.
    (run / "metrics.png").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, str(plot), str(run)], capture_output=True, text=True)
    assert done.returncode == 0 and (run / "metrics.png").stat().st_size > 0, done.stderr
    # Several files and no -o is a usage error.
    done = subprocess.run([sys.executable, str(plot), str(run), str(run)], capture_output=True, text=True)
    assert done.returncode == 2 and "-o OUT.png" in done.stderr, done.stderr
    print("run export: ok")


if __name__ == "__main__":
    main()
