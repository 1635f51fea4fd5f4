"""A PyTorch DistributedDataParallel comm hook that sends aps's formats on the wire.

    import aps.torch
    state = aps.torch.CommState(format="e4m3", scaling="aps")   # aps_train's vocabulary
    ddp_model.register_comm_hook(state, aps.torch.comm_hook)

Each gradient bucket is reduced by aps's own C++ code (the bucket hooks and the all-reduce
schedule aps_train uses: error feedback, APS or FP8-LM scaling, then two_shot, allgather or
ring), with the encoded bytes moved by torch.distributed point-to-point messages on uint8
tensors (gloo on CPU; NCCL where a GPU exists). The result is the mean over ranks, in the same
bits aps_train's all-reduce gives for the same gradients.
"""
import torch
import torch.distributed as dist

from . import _aps

# The keys of aps_train's YAML that apply to a gradient all-reduce, with their defaults.
DEFAULTS = {
    "format": "fp32",          # precision.format: a preset, "e4m3:stochastic", "mxfp4", "dettmers_dynamic", ...
    "rounding": "nearest",     # precision.rounding: nearest, stochastic, toward_zero
    "scaling": "none",         # precision.scaling: none, aps, global, autoscale (FP8-LM), block
    "block_size": 32,          # precision.block_size: values per scale with scaling: block (0: per chunk)
    "algorithm": "two_shot",   # comm.algorithm: two_shot, allgather, ring, native
    "error_feedback": False,   # precision.error_feedback
    "seed": 0,                 # seeds stochastic rounding (per step and bucket, as aps_train)
    "max_parameters": 65536,   # per-parameter state slots (residuals, statistics)
}


def _flatten(config):
    """Accepts flat keys, dotted keys ("precision.format") or aps_train's nested sections."""
    flat = {}
    for key, value in (config or {}).items():
        if key in ("precision", "comm") and isinstance(value, dict):
            flat.update(_flatten(value))
        elif "." in key and key.split(".", 1)[0] in ("precision", "comm"):
            flat[key.split(".", 1)[1]] = value
        else:
            flat[key] = value
    return flat


class CommState:
    """The hook's state: the wire settings, the C++ reducer and its per-parameter state.

    config: a dict in aps_train's vocabulary (flat, dotted or nested under precision/comm);
    keyword arguments override it. process_group: the group to reduce over (default: WORLD).
    After training: bytes_sent (this rank's wire bytes), steps, non_finite_steps.
    """

    def __init__(self, config=None, process_group=None, **overrides):
        settings = _flatten(config)
        settings.update(_flatten(overrides))
        unknown = sorted(set(settings) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"aps.torch.CommState: unknown key(s) {unknown}; known: {sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **settings}
        self.group = process_group
        # NCCL moves only device tensors: the encoded bytes go through the current GPU there.
        self.wire_device = None
        if dist.get_backend(process_group) == "nccl":
            self.wire_device = torch.device("cuda", torch.cuda.current_device())
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        fmt, rounding = str(self.settings["format"]), str(self.settings["rounding"])
        codec = fmt if (":" in fmt or rounding == "nearest") else f"{fmt}:{rounding}"
        self.transport = _aps.Transport(self.rank, self.world_size, self._exchange)
        self.reducer = _aps.BucketReducer(self.transport, codec, str(self.settings["scaling"]),
                                          str(self.settings["algorithm"]), bool(self.settings["error_feedback"]),
                                          int(self.settings["seed"]), int(self.settings["max_parameters"]),
                                          int(self.settings["block_size"]))
        self.step = 0
        self.steps = 0
        self.bytes_sent = 0
        self.non_finite_steps = 0
        self._non_finite = False
        self._ids = {}

    def _global_rank(self, rank):
        if self.group is None:
            return rank
        return dist.distributed_c10d._get_global_rank(self.group, rank)

    def _exchange(self, messages):
        """Delivers one round of aps's schedule: (src, dst, send, recv) with memoryviews of
        the local side. Messages between one pair are matched by their order in the round."""
        works, seen, landed = [], {}, []
        for src, dst, send, recv in messages:
            if src == dst:
                recv[:] = send
                continue
            tag = seen.get((src, dst), 0)
            seen[(src, dst)] = tag + 1
            if send is not None:
                data = torch.frombuffer(send, dtype=torch.uint8)
                if self.wire_device is not None:
                    data = data.to(self.wire_device)
                works.append(dist.isend(data, self._global_rank(dst), group=self.group, tag=tag))
            if recv is not None:
                target = torch.frombuffer(recv, dtype=torch.uint8)
                buffer = target if self.wire_device is None else torch.empty_like(target, device=self.wire_device)
                works.append(dist.irecv(buffer, self._global_rank(src), group=self.group, tag=tag))
                if buffer is not target:
                    landed.append((target, buffer))
        for work in works:
            work.wait()
        for target, buffer in landed:
            target.copy_(buffer)

    def param_id(self, tensor):
        """A stable id per parameter (its storage), for per-layer state."""
        key = tensor.data_ptr()
        if key not in self._ids:
            self._ids[key] = len(self._ids)
        return self._ids[key]

    def all_reduce(self, flat, layers, bucket=0):
        """Reduces a flat float32 CPU tensor in place to the mean over ranks. layers: a list of
        (param_id, offset) for the parameters in it, in order. Returns the flat tensor."""
        if flat.dtype != torch.float32 or flat.device.type != "cpu" or not flat.is_contiguous():
            raise ValueError(f"aps.torch: expected a contiguous float32 CPU tensor, got {flat.dtype} on {flat.device}")
        ids = [int(i) for i, _ in layers]
        offsets = [int(o) for _, o in layers]
        stats = self.reducer.reduce(flat.detach().numpy(), ids, offsets, int(bucket), self.step)
        self.bytes_sent += stats["bytes_sent"]
        self._non_finite = self._non_finite or stats["non_finite"]
        return flat

    def end_step(self):
        """After a step's last bucket (the hook calls it)."""
        self.reducer.finish_step()
        self.non_finite_steps += int(self._non_finite)
        self._non_finite = False
        self.step += 1
        self.steps += 1


def comm_hook(state, bucket):
    """DDP comm hook: ddp_model.register_comm_hook(state, aps.torch.comm_hook)."""
    buffer = bucket.buffer()
    flat = buffer if buffer.device.type == "cpu" and buffer.dtype == torch.float32 else buffer.float().cpu()
    base = buffer.data_ptr()
    size = buffer.element_size()
    layers = [(state.param_id(p), (g.data_ptr() - base) // size) for p, g in zip(bucket.parameters(),
                                                                               bucket.gradients())]
    layers.sort(key=lambda layer: layer[1])
    state.all_reduce(flat, layers, bucket.index())
    if flat is not buffer:
        buffer.copy_(flat)
    if bucket.is_last():
        state.end_step()
    future = torch.futures.Future()
    future.set_result(buffer)
    return future
