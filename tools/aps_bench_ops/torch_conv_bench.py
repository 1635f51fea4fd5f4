#!/usr/bin/python3
"""Times PyTorch's conv2d forward and backward on the same ResNet-20 (28x28) layer shapes
as aps_bench_ops, printing the same JSON lines, so the two can be compared line by line:
    /usr/bin/python3 tools/aps_bench_ops/torch_conv_bench.py --threads 2
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

# name, in channels, input size, out channels, kernel, stride, pad, count, input needs grad
LAYERS = [
    ("stem_1to16_28", 1, 28, 16, 3, 1, 1, 1, False),
    ("conv_16to16_28", 16, 28, 16, 3, 1, 1, 6, True),
    ("conv_16to32_s2", 16, 28, 32, 3, 2, 1, 1, True),
    ("shortcut_16to32_s2", 16, 28, 32, 1, 2, 0, 1, True),
    ("conv_32to32_14", 32, 14, 32, 3, 1, 1, 5, True),
    ("conv_32to64_s2", 32, 14, 64, 3, 2, 1, 1, True),
    ("shortcut_32to64_s2", 32, 14, 64, 1, 2, 0, 1, True),
    ("conv_64to64_7", 64, 7, 64, 3, 1, 1, 5, True),
]


def fastest_ms(fn, min_seconds, max_iterations):
    """Fastest wall and process-CPU milliseconds: the repetition least disturbed by other load."""
    fn()
    wall, cpu, spent = [], [], 0.0
    while len(wall) < max_iterations and (spent < min_seconds or len(wall) < 3):
        cpu_start = time.process_time()
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        cpu.append((time.process_time() - cpu_start) * 1e3)
        wall.append(seconds * 1e3)
        spent += seconds
    return min(wall), min(cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--max-iterations", type=int, default=20)
    parser.add_argument("--layer", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    total_ms, total_cpu, total_flops = 0.0, 0.0, 0.0
    for name, c, h, k, r, stride, pad, count, need_grad_in in LAYERS:
        if args.layer and args.layer != name:
            continue
        x = torch.randn(args.batch, c, h, h, requires_grad=need_grad_in)
        w = torch.randn(k, c, r, r, requires_grad=True)
        with torch.no_grad():
            y = F.conv2d(x, w, None, stride, pad)
        grad_out = torch.randn_like(y)
        p = y.shape[2]
        flops = 2.0 * args.batch * k * p * p * c * r * r

        def forward():
            with torch.no_grad():
                F.conv2d(x, w, None, stride, pad)

        def backward():
            out = F.conv2d(x, w, None, stride, pad)
            inputs = (x, w) if need_grad_in else (w,)
            torch.autograd.grad(out, inputs, grad_out)

        forward_ms, forward_cpu = fastest_ms(forward, args.min_seconds, args.max_iterations)
        # PyTorch's backward cannot run without its forward: time both, subtract the forward.
        both_ms, both_cpu = fastest_ms(backward, args.min_seconds, args.max_iterations)
        backward_ms, backward_cpu = both_ms - forward_ms, both_cpu - forward_cpu
        backward_flops = flops * (2.0 if need_grad_in else 1.0)
        print(json.dumps({"layer": name, "threads": args.threads, "batch": args.batch, "count": count,
                          "forward_ms": forward_ms, "backward_ms": backward_ms,
                          "forward_cpu_ms": forward_cpu, "backward_cpu_ms": backward_cpu,
                          "forward_gflops": flops / forward_ms * 1e-6,
                          "backward_gflops": backward_flops / backward_ms * 1e-6, "impl": "torch"}))
        total_ms += count * (forward_ms + backward_ms)
        total_cpu += count * (forward_cpu + backward_cpu)
        total_flops += count * (flops + backward_flops)
    if not args.layer:
        print(json.dumps({"layer": "resnet20_convs_total", "threads": args.threads, "batch": args.batch,
                          "ms": total_ms, "cpu_ms": total_cpu, "gflops": total_flops / total_ms * 1e-6,
                          "images_per_s_convs_only": args.batch / total_ms * 1e3, "impl": "torch"}))


if __name__ == "__main__":
    main()
