#!/usr/bin/python3
"""The PyTorch side of aps_bench_train: the same training step (forward, mean cross-entropy,
backward, SGD with momentum 0.9 and weight decay 5e-4) on the same kind of random data, with
the networks of tools/fixtures/make_model_fixtures.py (which mirror models/). Prints one JSON
line with images per second and the peak RSS (getrusage, MiB). --profile then runs the steps
again under torch.profiler and adds each op category's self CPU time per step as "profile",
in aps_bench_train's categories (PROFILE_CATEGORIES), for tools/perf/breakdown.py.
    /usr/bin/python3 tools/aps_bench_train/torch_bench.py --model resnet20 --input 1x28x28 \
        --batch 128 --threads 2 --steps 20
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import make_model_fixtures as m  # noqa: E402

CIFAR = {"resnet20": 20, "resnet32": 32, "resnet44": 44, "resnet56": 56, "resnet110": 110}
IMAGENET = {"resnet18": 18, "resnet34": 34, "resnet50": 50, "resnet101": 101, "resnet152": 152}


def build(name, in_channels, num_classes):
    """Returns (model, is_segmentation) for a registry name (models/ModelRegistry.cpp)."""
    if name in CIFAR:
        return m.cifar_resnet(CIFAR[name], in_channels, num_classes or 10), False
    if name == "resnet18_cifar":
        model = m.ResNet(m.BasicBlock, [2, 2, 2, 2], [64, 128, 256, 512], "cifar", 64, in_channels, num_classes or 10)
        return model, False
    if name in IMAGENET:
        depth = IMAGENET[name]
        block = m.Bottleneck if depth >= 50 else m.BasicBlock
        blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
        return m.ResNet(block, blocks, [64, 128, 256, 512], "imagenet", 64, in_channels, num_classes or 1000), False
    if name == "fcn_resnet20":
        backbone = m.cifar_resnet(20, in_channels, 0, dilate=[False, False, True])
        return m.FCN(backbone, num_classes or 19), True
    if name in ("fcn_resnet18_d8", "fcn_resnet50_d8"):
        depth = 18 if "18" in name else 50
        block = m.Bottleneck if depth >= 50 else m.BasicBlock
        blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
        backbone = m.ResNet(block, blocks, [64, 128, 256, 512], "imagenet", 64, in_channels, 0,
                            dilate=[False, False, True, True])
        return m.FCN(backbone, num_classes or 19), True
    raise SystemExit("torch_bench.py: unknown model '%s'" % name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--input", default="3x32x32")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--num-classes", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="add a per-op profile (torch.profiler) to the line")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the GPU reference for tools/device_check.sh)")
    parser.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                        help="autocast the forward and loss to this type (cuda only; fp16 with a gradient scaler)")
    parser.add_argument("--no-tf32", action="store_true", help="cuda: fp32 matrix products and convolutions in full fp32")
    args = parser.parse_args()
    c, h, w = (int(v) for v in args.input.split("x"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    cuda = args.device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("torch_bench.py: --device %s: this PyTorch sees no CUDA device" % args.device)
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = not args.no_tf32
        torch.backends.cudnn.allow_tf32 = not args.no_tf32
    elif args.amp != "none":
        raise SystemExit("torch_bench.py: --amp needs --device cuda")
    model, segmentation = build(args.model, c, args.num_classes)
    classes = model.classifier[4].out_channels if segmentation else model.fc.out_features
    model = model.to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(args.batch, c, h, w).to(args.device)
    y = torch.randint(0, classes, (args.batch, h, w) if segmentation else (args.batch,)).to(args.device)
    model.train()
    amp = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    scaler = torch.cuda.amp.GradScaler() if amp == torch.float16 else None

    def step():
        with torch.profiler.record_function("optimizer.zero_grad"):
            opt.zero_grad()
        if amp is None:
            loss = F.cross_entropy(model(x), y)
        else:
            with torch.autocast(device_type="cuda", dtype=amp):
                loss = F.cross_entropy(model(x), y)
        (scaler.scale(loss) if scaler else loss).backward()
        with torch.profiler.record_function("optimizer"):
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        return loss.item()  # on a GPU this waits for the step: the timing below is the device's

    for _ in range(args.warmup):
        step()
    cpu_start = time.process_time()  # user + system CPU: less noisy than wall time on a shared machine
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    line = {"tool": "torch_bench", "torch": torch.__version__, "model": args.model, "input": args.input,
            "batch": args.batch, "threads": args.threads, "steps": args.steps, "device": args.device,
            "amp": args.amp, "tf32": cuda and not args.no_tf32,
            "step_ms": round(1e3 * seconds / args.steps, 2),
            "images_per_s": round(args.batch * args.steps / seconds, 1),
            "cpu_ms_per_step": round(1e3 * cpu / args.steps, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
            "last_loss": round(loss, 4)}
    if args.profile:
        line["profile"] = profile(step, args.steps)
    print(json.dumps(line))


# aten ops (PyTorch 1.13, CPU) by aps_bench_train's profile categories. PyTorch computes a
# convolution's input and weight gradients in one op (convolution_backward), so its backward
# is one category here; anything not listed (allocation, views, copies) is "other".
PROFILE_CATEGORIES = {
    "conv.forward": ["aten::mkldnn_convolution", "aten::_slow_conv2d_forward", "aten::thnn_conv2d",
                     "aten::_convolution", "aten::convolution", "aten::conv2d", "aten::_nnpack_spatial_convolution"],
    "conv.backward": ["aten::convolution_backward", "aten::mkldnn_convolution_backward",
                      "aten::mkldnn_convolution_backward_input", "aten::mkldnn_convolution_backward_weights",
                      "aten::_slow_conv2d_backward"],
    "batchnorm.forward": ["aten::native_batch_norm", "aten::batch_norm", "aten::_batch_norm_impl_index"],
    "batchnorm.backward": ["aten::native_batch_norm_backward"],
    "elementwise": ["aten::relu", "aten::relu_", "aten::threshold_backward", "aten::add", "aten::add_", "aten::mul",
                    "aten::mul_", "aten::clamp_min", "aten::clamp_min_"],
    "pool.forward": ["aten::max_pool2d", "aten::max_pool2d_with_indices", "aten::adaptive_avg_pool2d",
                     "aten::_adaptive_avg_pool2d", "aten::mean", "aten::avg_pool2d"],
    "pool.backward": ["aten::max_pool2d_with_indices_backward", "aten::_adaptive_avg_pool2d_backward",
                      "aten::avg_pool2d_backward"],
    "loss.forward": ["aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax", "aten::nll_loss",
                     "aten::nll_loss_nd", "aten::nll_loss_forward", "aten::nll_loss2d", "aten::nll_loss2d_forward"],
    "loss.backward": ["aten::_log_softmax_backward_data", "aten::nll_loss_backward", "aten::nll_loss2d_backward"],
    "linear.forward": ["aten::linear", "aten::addmm"],
    "linear.backward": ["aten::mm"],
    "upsample.forward": ["aten::upsample_bilinear2d"],
    "upsample.backward": ["aten::upsample_bilinear2d_backward"],
}


def profile(step, steps):
    """Self CPU milliseconds per step by category; everything under the record_function scopes
    "optimizer" and "optimizer.zero_grad" counts as those; the autograd engine's wrappers as
    "autograd.engine"."""
    category = {op: name for name, ops in PROFILE_CATEGORIES.items() for op in ops}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = time.perf_counter() - start
    totals = {}
    for event in prof.events():
        scope, parent = None, event
        while parent is not None:
            if parent.name in ("optimizer", "optimizer.zero_grad"):
                scope = parent.name
            parent = parent.cpu_parent
        if scope is None:
            if event.name.startswith("autograd::engine") or event.name.endswith("Backward0"):
                scope = "autograd.engine"
            else:
                scope = category.get(event.name, "other")
        totals[scope] = totals.get(scope, 0.0) + event.self_cpu_time_total / 1e3 / steps
    return {"step_ms": round(1e3 * seconds / steps, 2),
            "ops": {name: {"ms_per_step": round(ms, 3)} for name, ms in sorted(totals.items())}}


if __name__ == "__main__":
    main()
