#!/usr/bin/python3
"""ResNet-20 on Fashion-MNIST with PyTorch DDP, its gradients all-reduced by aps's hook.

The network is aps's resnet20 (models/, the torchvision layout of a CIFAR ResNet), the recipe
that of configs/fmnist_resnet20_*.yaml: SGD with momentum 0.9 and weight decay 5e-4 (none on
biases and batch norm), cosine LR with a short warm-up, random crop (pad 2) and flip. Rank r
trains on every world-th sample of a per-epoch permutation. The data is Debian's
dataset-fashion-mnist (--data to read it elsewhere).

    PYTHONPATH=build/python /usr/bin/python3 tools/torchrun.py --standalone --nproc_per_node 4 \
        examples/pytorch_ddp_fmnist.py --format e4m3 --scaling aps

Prints the test accuracy and test loss after each epoch (and where --max-steps stops) and, at
the end, the bytes rank 0 sent.
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import aps.torch

DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist


class BasicBlock(torch.nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        downsample = None  # made first, registered last: torchvision's order of draws and names
        if stride != 1 or inplanes != planes:
            downsample = torch.nn.Sequential(torch.nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                             torch.nn.BatchNorm2d(planes))
        self.conv1 = torch.nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(planes)
        self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet20(torch.nn.Module):
    """aps's resnet20: a 3x3 stem of 16 channels, three stages of three basic blocks (16, 32, 64
    channels, the last two with stride 2), global average pooling, a linear classifier."""

    def __init__(self, in_channels=1, num_classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)
        stages, inplanes = [], 16
        for i, planes in enumerate((16, 32, 64)):
            blocks = [BasicBlock(inplanes, planes, 1 if i == 0 else 2)] + [BasicBlock(planes, planes, 1)
                                                                          for _ in range(2)]
            stages.append(torch.nn.Sequential(*blocks))
            inplanes = planes
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = torch.nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def load_idx(folder, name):
    path = os.path.join(folder, name)
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


def images(folder, name):
    x = torch.from_numpy(load_idx(folder, name).astype(np.float32)).unsqueeze(1)
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
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop after this many optimizer steps (0: all epochs); the LR schedule stays that of "
                             "--epochs")
    parser.add_argument("--data", default=DATA, help="folder of the Fashion-MNIST idx .gz files")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    train_x, train_y = images(args.data, "train-images-idx3-ubyte.gz"), torch.from_numpy(
        load_idx(args.data, "train-labels-idx1-ubyte.gz").astype(np.int64))
    test_x, test_y = images(args.data, "t10k-images-idx3-ubyte.gz"), torch.from_numpy(
        load_idx(args.data, "t10k-labels-idx1-ubyte.gz").astype(np.int64))
    if args.train_samples:
        train_x, train_y = train_x[: args.train_samples], train_y[: args.train_samples]
    if args.test_samples:
        test_x, test_y = test_x[: args.test_samples], test_y[: args.test_samples]

    model = ResNet20(in_channels=1, num_classes=10)
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

    def evaluate():
        """Top-1 accuracy and mean cross-entropy on the test set (every rank computes the same)."""
        ddp.eval()
        correct, loss = 0, 0.0
        with torch.no_grad():
            for i in range(0, test_x.shape[0], 500):
                logits = model(test_x[i:i + 500])
                correct += int((logits.argmax(1) == test_y[i:i + 500]).sum())
                loss += float(F.cross_entropy(logits, test_y[i:i + 500], reduction="sum"))
        return correct / test_x.shape[0], loss / test_x.shape[0]

    step = 0
    start = time.time()
    accuracy = test_loss = None
    stop = args.max_steps if args.max_steps > 0 else total
    for epoch in range(args.epochs):
        if step >= stop:
            break
        order = torch.randperm(train_x.shape[0], generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        mine = order[rank::world]
        gen = torch.Generator().manual_seed(args.seed * 100000 + epoch * world + rank)
        ddp.train()
        for b in range(min(steps_per_epoch, stop - step)):
            idx = mine[b * args.batch_size:(b + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = F.cross_entropy(ddp(augment(train_x[idx], gen)), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        accuracy, test_loss = evaluate()
        if rank == 0:
            print(f"epoch {epoch + 1}, step {step}: test accuracy {accuracy:.4f}, test loss {test_loss:.4f} "
                  f"({time.time() - start:.0f} s)", flush=True)
    if rank == 0:
        print(f"format {args.format} scaling {args.scaling}: final test accuracy {accuracy:.4f}, test loss "
              f"{test_loss:.4f}, "
              f"rank 0 sent {state.bytes_sent / 2**20:.1f} MiB in {state.steps} steps "
              f"({state.non_finite_steps} with non-finite gradients)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
