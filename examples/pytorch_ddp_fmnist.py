#!/usr/bin/python3
"""ResNet-20 on Fashion-MNIST with PyTorch DDP, its gradients all-reduced by aps's hook.

The network is aps's resnet20 written in PyTorch (tools/fixtures/make_model_fixtures.py, the
torchvision layout), the recipe that of configs/fmnist_resnet20_*.yaml: SGD with momentum 0.9
and weight decay 5e-4 (none on biases and batch norm), cosine LR with a short warm-up, random
crop (pad 2) and flip. Rank r trains on every world-th sample of a per-epoch permutation.

    PYTHONPATH=build/python /usr/bin/python3 tools/torchrun.py --standalone --nproc_per_node 4 \
        examples/pytorch_ddp_fmnist.py --format e4m3 --scaling aps

Prints the test accuracy after each epoch and, at the end, the bytes rank 0 sent.
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import aps.torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))
import make_model_fixtures  # noqa: E402  (aps's networks in PyTorch)

DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(name):
    path = os.path.join(DATA, name)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SystemExit(f"pytorch_ddp_fmnist.py: cannot read '{path}': {e} (install dataset-fashion-mnist)")
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * dims)
    if data.size != int(np.prod(shape)):
        raise SystemExit(f"pytorch_ddp_fmnist.py: '{path}' is truncated ({data.size} of {np.prod(shape)} bytes)")
    return data.reshape(shape)


def images(name):
    x = torch.from_numpy(load_idx(name).astype(np.float32)).unsqueeze(1)
    return ((x / 255.0) - 0.2860) / 0.3530


def augment(x, generator):
    """Random crop of 28 from the image padded by 2, and a horizontal flip with p = 1/2."""
    n = x.shape[0]
    padded = F.pad(x, (2, 2, 2, 2))
    dx = torch.randint(0, 5, (n,), generator=generator)
    dy = torch.randint(0, 5, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    out = torch.empty_like(x)
    for i in range(n):
        crop = padded[i, :, dy[i]:dy[i] + 28, dx[i]:dx[i] + 28]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="fp32", help="wire format (precision.format), e.g. fp32, e4m3, e5m2")
    parser.add_argument("--scaling", default="none", help="none, aps, global or autoscale (precision.scaling)")
    parser.add_argument("--algorithm", default="two_shot", help="two_shot, allgather, ring or native")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--train-samples", type=int, default=10000, help="0: all 60000")
    parser.add_argument("--test-samples", type=int, default=5000, help="0: all 10000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    train_x, train_y = images("train-images-idx3-ubyte.gz"), torch.from_numpy(
        load_idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    test_x, test_y = images("t10k-images-idx3-ubyte.gz"), torch.from_numpy(
        load_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    if args.train_samples:
        train_x, train_y = train_x[: args.train_samples], train_y[: args.train_samples]
    if args.test_samples:
        test_x, test_y = test_x[: args.test_samples], test_y[: args.test_samples]

    model = make_model_fixtures.cifar_resnet(20, in_channels=1, num_classes=10)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = aps.torch.CommState(format=args.format, scaling=args.scaling, algorithm=args.algorithm, seed=args.seed)
    ddp.register_comm_hook(state, aps.torch.comm_hook)

    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=args.lr, momentum=0.9)
    steps_per_epoch = train_x.shape[0] // (args.batch_size * world)
    total = steps_per_epoch * args.epochs
    warmup = max(1, int(0.2 * steps_per_epoch))

    def lr_at(step):
        if step < warmup:
            return 0.01 + (args.lr - 0.01) * step / warmup
        return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    step = 0
    start = time.time()
    for epoch in range(args.epochs):
        order = torch.randperm(train_x.shape[0], generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        mine = order[rank::world]
        gen = torch.Generator().manual_seed(args.seed * 100000 + epoch * world + rank)
        ddp.train()
        for b in range(steps_per_epoch):
            idx = mine[b * args.batch_size:(b + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = F.cross_entropy(ddp(augment(train_x[idx], gen)), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        ddp.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum())
                          for i in range(0, test_x.shape[0], 500))
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {correct / test_x.shape[0]:.4f} (loss {loss.item():.3f}, "
                  f"{time.time() - start:.0f} s)", flush=True)
    if rank == 0:
        print(f"format {args.format} scaling {args.scaling}: final test accuracy {correct / test_x.shape[0]:.4f}, "
              f"rank 0 sent {state.bytes_sent / 2**20:.1f} MiB in {state.steps} steps "
              f"({state.non_finite_steps} with non-finite gradients)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
