#!/usr/bin/python3
"""Step time of a small model under DDP with aps's comm hook, synchronous (overlap=False: each
bucket reduced inside the hook) against overlapped (the default: a pending Future, the bucket
reduced on the hook's worker thread while backward goes on), in alternating rounds.

    PYTHONPATH=build/python /usr/bin/python3 tools/torchrun.py --standalone --nproc_per_node 2 \\
        tools/perf/ddp_hook_overlap.py --rounds 6 --steps 20

Two DDP replicas of one model (same initial weights) are trained side by side, one per hook
mode; a round times --steps steps of each, in turn, the order swapping every round. Rank 0
prints each round's median step time per mode and, at the end, the median over rounds and the
median of the per-round ratios. Use an idle machine: the two modes share the same cores.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import aps.torch


def make_model(width, depth):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, width), torch.nn.ReLU()]
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per mode and round")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=6, help="hidden width x width layers")
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    parser.add_argument("--format", default="e4m3")
    parser.add_argument("--scaling", default="aps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)
    runs = {}
    for overlap in (False, True):
        model = make_model(args.width, args.depth)
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
        state = aps.torch.CommState(format=args.format, scaling=args.scaling, overlap=overlap)
        ddp.register_comm_hook(state, aps.torch.comm_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        runs["overlap" if overlap else "sync"] = (ddp, opt, state)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 256, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)

    def step(ddp, opt):
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for ddp, opt, _ in runs.values():  # warm-up: DDP rebuilds its buckets after the first step
        for _ in range(3):
            step(ddp, opt)
    medians = {name: [] for name in runs}
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            ddp, opt, _ = runs[name]
            dist.barrier()
            times = []
            for _ in range(args.steps):
                start = time.perf_counter()
                step(ddp, opt)
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times))
        if rank == 0:
            print(f"round {r + 1}: " + ", ".join(f"{n} {medians[n][-1] * 1e3:.1f} ms" for n in runs), flush=True)
    if rank == 0:
        ratios = [s / o for s, o in zip(medians["sync"], medians["overlap"])]
        params = sum(p.numel() for p in runs["sync"][0].parameters())
        print(f"{world} ranks, gloo, {params} parameters, {args.format} + {args.scaling}, batch {args.batch}/rank, "
              f"bucket {args.bucket_mb} MB, {args.threads} thread(s)/rank: median step sync "
              f"{statistics.median(medians['sync']) * 1e3:.1f} ms, overlap "
              f"{statistics.median(medians['overlap']) * 1e3:.1f} ms; sync/overlap per round "
              + " ".join(f"{q:.2f}" for q in ratios) + f" (median {statistics.median(ratios):.2f})", flush=True)
    for _, _, state in runs.values():
        state.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
