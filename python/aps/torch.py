"""aps for PyTorch: a DistributedDataParallel comm hook that sends aps's formats on the wire,
and a straight-through fake-quantization op.

    import aps.torch
    state = aps.torch.CommState(format="e4m3", scaling="aps")   # aps_train's vocabulary
    ddp_model.register_comm_hook(state, aps.torch.comm_hook)

    y = aps.torch.fake_quantize(x, "e4m3")   # forward: aps.quantize; backward: the identity

Each gradient bucket is reduced by aps's own C++ code (the bucket hooks and the all-reduce
schedule aps_train uses: error feedback, APS or FP8-LM scaling, then two_shot, allgather or
ring), with the encoded bytes moved by torch.distributed point-to-point messages on uint8
tensors (gloo on CPU; NCCL where a GPU exists). The result is the mean over ranks, in the same
bits aps_train's all-reduce gives for the same gradients. The hook returns a pending Future:
one worker thread per CommState reduces the buckets in the order DDP hands them over (the
same on every rank), while backward goes on computing the next buckets' gradients.
"""
import queue
import threading

import torch
import torch.distributed as dist

import aps
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
    "overlap": True,           # comm.overlap: reduce on a worker thread during backward (False: in the hook)
    "hybrid": [],              # precision.hybrid: [{"pattern": "fc.*", "format": "fp16"}, ...], first match wins
    "hybrid_auto": False,      # precision.hybrid_auto: aps_train's alone (the hook keeps the rules' formats)
    "hybrid_underflow": 0.01,  # hybrid_auto's thresholds: accepted, read only with hybrid_auto
    "hybrid_saturation": 0.0001,
}
# precision.scaling's names (autoscale is FP8-LM's automatic scaling; fp8lm is the same).
SCALINGS = ("none", "aps", "global", "autoscale", "fp8lm", "block")


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

    def __init__(self, config=None, process_group=None, model=None, **overrides):
        settings = _flatten(config)
        settings.update(_flatten(overrides))
        unknown = sorted(set(settings) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"aps.torch.CommState: unknown key(s) {unknown}; known: {sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **settings}
        scaling = str(self.settings["scaling"])
        if scaling not in SCALINGS:
            raise ValueError(f"aps.torch.CommState: scaling = '{scaling}' is unknown; known: {', '.join(SCALINGS)}")
        if self.settings["hybrid_auto"]:
            raise ValueError("aps.torch.CommState: hybrid_auto (widening a layer's format from its statistics) is "
                             "aps_train's alone; the hook sends the formats the hybrid rules give")
        self.group = process_group
        # NCCL moves only device tensors: the encoded bytes go through the current GPU there.
        self.wire_device = None
        if dist.get_backend(process_group) == "nccl":
            self.wire_device = torch.device("cuda", torch.cuda.current_device())
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        rounding = str(self.settings["rounding"])
        self._rules = _hybrid_rules(self.settings["hybrid"])
        codecs = [_codec(self.settings["format"], rounding)] + [_codec(fmt, rounding) for _, fmt in self._rules]
        self._names = {}  # data_ptr -> parameter name, for the hybrid rules
        if model is not None:
            module = getattr(model, "module", model)  # a DDP model: its module's names
            self._names = {p.data_ptr(): name for name, p in module.named_parameters()}
        if self._rules and not self._names:
            raise ValueError("aps.torch.CommState: hybrid rules match parameter names: pass model=<the module>")
        self.transport = _aps.Transport(self.rank, self.world_size, self._exchange)
        self.reducer = _aps.BucketReducer(self.transport, codecs, scaling, str(self.settings["algorithm"]),
                                          bool(self.settings["error_feedback"]), int(self.settings["seed"]),
                                          int(self.settings["max_parameters"]), int(self.settings["block_size"]))
        self.overlap = bool(self.settings["overlap"])
        self.step = 0
        self.steps = 0
        self.bytes_sent = 0
        self.non_finite_steps = 0
        self._non_finite = False
        self._ids = {}
        self._formats = {}
        self._queue = None
        self._worker = None
        self._failure = None

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

    def param_format(self, tensor):
        """The index of the codec a parameter travels in: 0 for precision.format, 1 + r for the
        first hybrid rule r whose pattern matches its name."""
        key = tensor.data_ptr()
        if key not in self._formats:
            fmt = 0
            if self._rules:
                name = self._names.get(key)
                if name is None:
                    raise ValueError("aps.torch.CommState: a bucket holds a parameter that is not in model=")
                fmt = next((1 + r for r, (pattern, _) in enumerate(self._rules) if _aps.glob_match(pattern, name)), 0)
            self._formats[key] = fmt
        return self._formats[key]

    def all_reduce(self, flat, layers, bucket=0, formats=()):
        """Reduces a flat float32 CPU tensor in place to the mean over ranks. layers: a list of
        (param_id, offset) for the parameters in it, in order; formats: their codec indices
        (param_format; empty: all precision.format). Returns the flat tensor."""
        if flat.dtype != torch.float32 or flat.device.type != "cpu" or not flat.is_contiguous():
            raise ValueError(f"aps.torch: expected a contiguous float32 CPU tensor, got {flat.dtype} on {flat.device}")
        ids = [int(i) for i, _ in layers]
        offsets = [int(o) for _, o in layers]
        stats = self.reducer.reduce(flat.detach().numpy(), ids, offsets, int(bucket), self.step,
                                    [int(f) for f in formats])
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


    def reduce_bucket(self, buffer, layers, index, last, formats=()):
        """A DDP bucket's reduction, in place in `buffer` (any dtype or device: reduced in
        float32 on the CPU), then end_step() after the step's last bucket."""
        flat = buffer if buffer.device.type == "cpu" and buffer.dtype == torch.float32 else buffer.float().cpu()
        self.all_reduce(flat, layers, index, formats)
        if flat is not buffer:
            buffer.copy_(flat)
        if last:
            self.end_step()
        return buffer

    def submit(self, buffer, layers, index, last, formats=()):
        """reduce_bucket on the worker thread; returns a Future completed with `buffer`. Buckets
        are reduced in the order they are submitted; after a failure, every later one fails
        with the same error."""
        if self._worker is None:
            self._queue = queue.SimpleQueue()
            self._worker = threading.Thread(target=self._work, name="aps-comm", daemon=True)
            self._worker.start()
        future = torch.futures.Future()
        self._queue.put((future, (buffer, layers, index, last, formats)))
        return future

    def _work(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, args = item
            if self._failure is None:
                try:
                    future.set_result(self.reduce_bucket(*args))
                    continue
                except Exception as e:  # noqa: BLE001  (handed to the Future: DDP raises it in backward)
                    self._failure = e
            future.set_exception(self._failure)

    def close(self):
        """Ends the worker thread once the buckets handed to it are reduced."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None


def _codec(fmt, rounding):
    fmt = str(fmt)
    return fmt if (":" in fmt or rounding == "nearest") else f"{fmt}:{rounding}"


def _hybrid_rules(rules):
    """precision.hybrid as (pattern, format) pairs: [{"pattern": "fc.*", "format": "fp16"}, ...]."""
    if not isinstance(rules, (list, tuple)):
        raise ValueError(f"aps.torch.CommState: hybrid is a list of {{pattern, format}} rules, not {rules!r}")
    out = []
    for rule in rules:
        if not isinstance(rule, dict) or set(rule) != {"pattern", "format"} or not isinstance(rule["format"], str):
            raise ValueError("aps.torch.CommState: a hybrid rule is {'pattern': 'fc.*', 'format': 'fp16'} (a format "
                             f"name or codec spec), not {rule!r}")
        out.append((str(rule["pattern"]), rule["format"]))
    return out


def comm_hook(state, bucket):
    """DDP comm hook: ddp_model.register_comm_hook(state, aps.torch.comm_hook). Returns a pending
    Future reduced on state's worker thread (comm.overlap, the default), or with overlap=False
    a completed one reduced here."""
    buffer = bucket.buffer()
    base = buffer.data_ptr()
    size = buffer.element_size()
    layers = [((g.data_ptr() - base) // size, state.param_id(p), state.param_format(p))
              for p, g in zip(bucket.parameters(), bucket.gradients())]
    layers.sort()
    formats = [f for _, _, f in layers]
    layers = [(i, offset) for offset, i, _ in layers]
    if state.overlap:
        return state.submit(buffer, layers, bucket.index(), bucket.is_last(), formats)
    state.reduce_bucket(buffer, layers, bucket.index(), bucket.is_last(), formats)
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


class _FakeQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, format, rounding, block_size, seed, stream):
        if block_size is None:
            return aps.quantize(x, format, rounding, seed, stream)
        return aps.block_quantize(x, format, block_size, rounding, seed, stream)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None, None


def fake_quantize(x, format, rounding="nearest", block_size=None, seed=0, stream=0):
    """x rounded to an aps format in the forward pass, the gradient passed through unchanged in
    the backward pass (the straight-through estimator), for quantization-aware experiments.

    format: a preset name, a dict of format keys or an aps.Format (aps.quantize), or an MX type
    name ("mxfp4", "mxfp8_e4m3", ...: its element format with a scale per 32 values).
    block_size: a power-of-two scale per block_size values (aps.block_quantize; 0: one scale).
    The result has x's shape, dtype and device; seed and stream drive stochastic rounding.
    """
    if isinstance(format, str) and format in aps.MX_ELEMENTS:
        format, block_size = aps.MX_ELEMENTS[format], 32 if block_size is None else block_size
    return _FakeQuantize.apply(x, format, rounding, block_size, seed, stream)
