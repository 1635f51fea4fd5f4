"""Run under torchrun (gloo, CPU): checks aps.torch's DDP comm hook.

1. The reduced bucket equals an independent NumPy computation of aps's two_shot numerics
   with E4M3 and APS, bit for bit: per layer the shift s = emax - max over ranks of
   ceil(log2(N max|g|)), every rank's g * 2^s rounded to E4M3 (nearest-even), the owner's
   fp32 sum in rank order, that sum rounded to E4M3 again for the all-gather, then * 2^-s / N.
2. The same for MXFP4 (scaling: block): fresh per-block scales for each rank's chunk and for the
   owner's sum.
3. fp32 (native) gives the mean in rank order; allgather and ring give close results.
4. A small DDP training with E4M3 + APS through the hook learns.
5. The hook's pending Futures (comm.overlap, reduced on a worker thread) give the bits of the
   synchronous hook (overlap: False) over a training of many buckets; a failure reaches the
   Future and every later one.
6. Hybrid rules: a bucket mixing formats gives each parameter the bits its format alone gives;
   through DDP the rules match the module's parameter names.
7. CommState's errors: the scaling names (autoscale among them), hybrid_auto, hybrid without
   model=.

    torchrun --nproc_per_node 4 tests/python/ddp_hook_check.py
"""
import math
import os
import re
import sys
import threading

import numpy as np
import torch
import torch.distributed as dist

import aps
import aps.torch


def e4m3_nearest(x):
    """OCP E4M3 round-to-nearest-even, written independently of aps (finite inputs that stay
    below 448 after rounding, as APS guarantees)."""
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    nz = x != 0
    exponent = np.floor(np.log2(np.abs(x[nz])))
    exponent = np.maximum(exponent, -6.0)           # subnormals share the smallest normal's step
    step = np.exp2(exponent - 3.0)                   # 3 mantissa bits
    out[nz] = np.round(x[nz] / step) * step          # numpy rounds halves to even
    assert np.all(np.abs(out) <= 448.0)
    return out.astype(np.float32)


def rank_gradients(rank, sizes, step):
    rng = np.random.default_rng(1000 * step + rank)
    # Layers of very different magnitudes, one with values that flush without scaling.
    scales = [1e-3, 1.0, 1e-6][: len(sizes)]
    return [(rng.standard_normal(n) * s).astype(np.float32) for n, s in zip(sizes, scales)]


def reference(world, sizes, step):
    grads = [rank_gradients(r, sizes, step) for r in range(world)]
    out = []
    for layer in range(len(sizes)):
        exps = []
        for r in range(world):
            m = float(np.max(np.abs(grads[r][layer])))
            exps.append(math.ceil(math.log2(world * m)))  # world * m is exact in double
        shift = 8 - max(exps)                             # E4M3's largest finite value 448 = 1.75 * 2^8
        total = np.zeros(sizes[layer], np.float32)
        for r in range(world):
            scaled = (grads[r][layer].astype(np.float64) * 2.0 ** shift).astype(np.float32)
            total = (total + e4m3_nearest(scaled)).astype(np.float32)
        reduced = e4m3_nearest(total)
        unscaled = (reduced.astype(np.float64) * 2.0 ** -shift).astype(np.float32)
        out.append((unscaled / np.float32(world)).astype(np.float32))
    return np.concatenate(out)


def check_bits(rank, world):
    sizes = [1000, 37, 513]
    state = aps.torch.CommState({"precision": {"format": "e4m3", "scaling": "aps"}, "comm": {"algorithm": "two_shot"}})
    for step in range(3):
        flat = torch.from_numpy(np.concatenate(rank_gradients(rank, sizes, step)))
        layers = [(i, int(sum(sizes[:i]))) for i in range(len(sizes))]
        state.all_reduce(flat, layers)
        state.end_step()
        expected = reference(world, sizes, step)
        got = flat.numpy()
        bad = np.flatnonzero(got.view(np.uint32) != expected.view(np.uint32))
        assert bad.size == 0, f"rank {rank} step {step}: {bad.size} values differ, first at {bad[:5]}: " \
                              f"{got[bad[:5]]} vs {expected[bad[:5]]}"
        # Every rank holds the same bits.
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        assert all(torch.equal(g, flat) for g in gathered)
    assert state.bytes_sent > 0
    # E4M3 is a quarter of fp32's bytes on the wire (plus a few bytes of headers and checks).
    fp32 = aps.torch.CommState(format="fp32", algorithm="two_shot")
    flat = torch.from_numpy(np.concatenate(rank_gradients(rank, sizes, 0)))
    fp32.all_reduce(flat, [(0, 0)])
    assert state.bytes_sent / 3 < 0.3 * fp32.bytes_sent, (state.bytes_sent, fp32.bytes_sent)
    return "bit-exact"


def check_block_bits(rank, world):
    """MXFP4 through the hook (scaling: block, block 32) against NumPy: every rank's chunk c
    block-quantized (blocks from the chunk's start), the owner's fp32 sum in rank order
    block-quantized again with fresh scales, then / N. No exponent agreement between ranks."""
    n, block = 1550, 32
    grads = [rank_gradients(r, [n], 3)[0] * np.float32(10.0 ** (r - 2)) for r in range(world)]

    def blockq(v):
        out = np.empty_like(v)
        for b in range(0, v.size, block):
            part = v[b:b + block].astype(np.float64)
            amax = np.abs(part).max()
            e = 0 if amax == 0 else int(np.floor(np.log2(amax))) - 2   # E2M1: max 6 = 1.5 * 2^2
            scaled = (part * 2.0 ** -e).astype(np.float32)
            q = aps.quantize(scaled, "e2m1")                           # saturates at 6 by definition
            out[b:b + block] = (q.astype(np.float64) * 2.0 ** e).astype(np.float32)
        return out

    expected = np.empty(n, np.float32)
    for c in range(world):
        lo, hi = n * c // world, n * (c + 1) // world
        total = np.zeros(hi - lo, np.float32)
        for r in range(world):
            total = (total + blockq(grads[r][lo:hi])).astype(np.float32)
        expected[lo:hi] = blockq(total) / np.float32(world)
    for config in ({"format": "e2m1", "scaling": "block", "block_size": block}, {"format": "mxfp4"}):
        state = aps.torch.CommState(config)
        flat = torch.from_numpy(grads[rank].copy())
        state.all_reduce(flat, [(0, 0)])
        got = flat.numpy()
        bad = np.flatnonzero(got.view(np.uint32) != expected.view(np.uint32))
        assert bad.size == 0, f"{config}: rank {rank}: {bad.size} values differ, first {got[bad[:3]]} vs " \
                              f"{expected[bad[:3]]}"
    return "block-scaled bit-exact"


def check_algorithms(rank, world):
    sizes = [4096]
    grads = [rank_gradients(r, sizes, 7)[0] for r in range(world)]
    exact = np.zeros(sizes[0], np.float32)
    for g in grads:
        exact = (exact + g).astype(np.float32)
    exact = exact / np.float32(world)
    native = aps.torch.CommState(algorithm="native")
    flat = torch.from_numpy(grads[rank].copy())
    native.all_reduce(flat, [(0, 0)])
    assert np.array_equal(flat.numpy(), exact), "native: not the fp32 mean in rank order"
    for algorithm in ("allgather", "ring", "two_shot"):
        state = aps.torch.CommState(format="e5m2", scaling="aps", algorithm=algorithm)
        flat = torch.from_numpy(grads[rank].copy())
        state.all_reduce(flat, [(0, 0)])
        rel = np.linalg.norm(flat.numpy() - exact) / np.linalg.norm(exact)
        assert rel < 0.2, f"{algorithm}: relative error {rel}"
    return "algorithms"


def check_training(rank, world):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = aps.torch.CommState(format="e4m3", scaling="aps")
    ddp.register_comm_hook(state, aps.torch.comm_hook)
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 20, generator=g) * 2
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def batch(seed, n=64):
        gen = torch.Generator().manual_seed(seed)
        labels = torch.randint(0, 4, (n,), generator=gen)
        return centers[labels] + torch.randn(n, 20, generator=gen), labels

    for step in range(60):
        x, y = batch(10000 * rank + step)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = batch(999, 2000)
    with torch.no_grad():
        accuracy = (ddp(x).argmax(1) == y).float().mean().item()
    # Replicas stay identical: every rank applied the same reduced gradient.
    for p in ddp.parameters():
        copies = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(copies, p.detach())
        assert all(torch.equal(c, p) for c in copies), "replicas diverged"
    assert state.steps == 60, state.steps
    assert accuracy > 0.9, f"E4M3 + APS through the hook reached only {accuracy:.3f}"
    return f"training accuracy {accuracy:.3f}"


def train_steps(rank, overlap, steps=12, config=None):
    """Parameters after a short DDP training of a model in several buckets through the hook."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    # A bucket cap of ~4 KiB: several buckets per step, so the order of their reduction matters.
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.004)
    settings = {"format": "e4m3:stochastic", "scaling": "aps", "error_feedback": True, "seed": 3}
    settings.update(config or {})
    state = aps.torch.CommState(settings, overlap=overlap, model=ddp)
    ddp.register_comm_hook(state, aps.torch.comm_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(32, 20, generator=gen)
        y = torch.randint(0, 4, (32,), generator=gen)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    state.close()
    return [p.detach().clone() for p in model.parameters()], state


def check_overlap(rank, world):
    sync, sync_state = train_steps(rank, overlap=False)
    overlapped, state = train_steps(rank, overlap=True)
    assert state.overlap and not sync_state.overlap
    assert state.steps == sync_state.steps == 12, (state.steps, sync_state.steps)
    assert state.bytes_sent == sync_state.bytes_sent, (state.bytes_sent, sync_state.bytes_sent)
    for a, b in zip(sync, overlapped):
        assert torch.equal(a.view(-1).view(torch.int32), b.view(-1).view(torch.int32)), "overlap changed the bits"
    # The hook hands back pending Futures: a bucket on the worker thread completes later.
    blocker = threading.Event()
    state = aps.torch.CommState(format="e4m3")
    state.submit(torch.zeros(4), [(0, 0)], 0, False).then(lambda f: blocker.wait())
    future = state.submit(torch.zeros(4), [(0, 0)], 1, False)
    assert not future.done(), "the hook's Future completed before the worker reduced it"
    blocker.set()
    future.wait()
    # A failure reaches its Future and the later ones (every rank fails alike: no message sent).
    failing = aps.torch.CommState(format="e4m3", max_parameters=4)
    futures = [failing.submit(torch.zeros(4), [(9, 0)], 0, False), failing.submit(torch.zeros(4), [(0, 0)], 1, True)]
    for f in futures:
        try:
            f.wait()
        except Exception as e:  # noqa: BLE001
            assert "max_parameters" in str(e), e
        else:
            raise AssertionError("a failed reduction completed its Future")
    state.close()
    failing.close()
    return "overlap bit-identical"


def check_hybrid(rank, world):
    sizes = [300, 50, 200]
    grads = np.concatenate(rank_gradients(rank, sizes, 4))
    # Parameters 0 and 2 in fp16 (a hybrid rule), 1 in E4M3, APS on both (formats given here:
    # the model's names are not read).
    hybrid = aps.torch.CommState(format="e4m3", scaling="aps", hybrid=[{"pattern": "x", "format": "fp16"}],
                                 model=torch.nn.Linear(1, 1))
    flat = torch.from_numpy(grads.copy())
    hybrid.all_reduce(flat, [(0, 0), (1, 300), (2, 350)], formats=[1, 0, 1])
    fp16 = aps.torch.CommState(format="fp16", scaling="aps")
    alone = torch.from_numpy(np.concatenate([grads[0:300], grads[350:550]]))
    fp16.all_reduce(alone, [(0, 0), (2, 300)])
    e4m3 = aps.torch.CommState(format="e4m3", scaling="aps")
    middle = torch.from_numpy(grads[300:350].copy())
    e4m3.all_reduce(middle, [(1, 0)])
    expected = torch.cat([alone[:300], middle, alone[300:]])
    assert torch.equal(flat.view(torch.int32), expected.view(torch.int32)), "hybrid: not each format's bits"
    fp16.all_reduce(torch.from_numpy(grads[300:350].copy()), [(1, 0)])
    assert e4m3.bytes_sent < fp16.bytes_sent and hybrid.bytes_sent < fp16.bytes_sent, "formats not told apart"
    # aps_train's section, with the module's names: "0.*" (the first Linear) in fp16.
    section = {"precision": {"format": "e4m3", "scaling": "aps", "hybrid": [{"pattern": "0.*", "format": "fp16"}],
                             "hybrid_auto": False, "hybrid_underflow": 0.01}}
    params, state = train_steps(rank, overlap=True, steps=3, config=section["precision"])
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    named = aps.torch.CommState(section, model=model)
    assert [named.param_format(p) for p in model.parameters()] == [1, 1, 0, 0]
    assert state.steps == 3
    return "hybrid"


def check_errors(rank, world):
    def refused(pattern, *args, **kwargs):
        try:
            aps.torch.CommState(*args, **kwargs)
        except ValueError as e:
            assert re.search(pattern, str(e)), f"{e!r} does not match {pattern!r}"
            return
        raise AssertionError(f"CommState({args}, {kwargs}) was accepted")

    refused(r"scaling = 'fp9'.*none, aps, global, autoscale, fp8lm, block", format="e4m3", scaling="fp9")
    refused("hybrid_auto", {"precision": {"format": "e4m3", "hybrid_auto": True}})
    refused("model=", format="e4m3", hybrid=[{"pattern": "fc.*", "format": "fp16"}])
    refused("a hybrid rule is", format="e4m3", hybrid=[{"pattern": "fc.*"}], model=torch.nn.Linear(1, 1))
    refused("unknown key", format="e4m3", kahan=True)
    for scaling in ("autoscale", "fp8lm"):
        aps.torch.CommState(format="e4m3", scaling=scaling)
    return "errors"


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    results = [check_bits(rank, world), check_block_bits(rank, world), check_algorithms(rank, world),
               check_training(rank, world), check_overlap(rank, world), check_hybrid(rank, world),
               check_errors(rank, world)]
    dist.barrier()
    if rank == 0:
        print("ddp_hook_check: ok:", ", ".join(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
