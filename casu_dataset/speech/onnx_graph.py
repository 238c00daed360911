"""A small ONNX graph interpreter on torch: how Piper's VITS voices run the same arithmetic on
every x86-64 CPU.

onnxruntime picks its MLAS kernels from CPUID and has no override, so the same voice gave other
float32 samples on an AVX2 CPU than on an AVX-512 one. Here every node runs as a torch op, in a
process whose kernel choice is pinned (`casu_dataset.core.isa.PORTABLE_ENV`: torch's generic ATen
kernels, MKL's conditional numerical reproducibility, glibc's baseline libm, one thread, oneDNN
off), so the same instructions run on every CPU and the output is the same to the last bit.

One torch op is not used: `torch.sqrt` goes through MKL's vector math, whose result differed
between a real AMD CPU and QEMU's emulated Intel ones even with MKL pinned (it is not correctly
rounded); numpy's square root is the IEEE one, the same everywhere. Every other op the graph uses
gave the same bits natively and under `qemu-x86_64 -cpu Nehalem/Haswell`
(tests/test_cross_cpu.py).

Only the operators that Piper's VITS exports use are implemented (opset 15, as exported by
PyTorch); any other is an OnnxGraphError naming the operator and the node.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from casu_dataset.core.errors import RunError


class OnnxGraphError(RunError, RuntimeError):
    """A model this interpreter cannot run; the message names the file, node and operator."""


# ONNX TensorProto element types -> torch dtypes; every float type computes in the graph's dtype.
_FLOAT_CODES = (1, 10, 11)
_DTYPES = {6: torch.int32, 7: torch.int64, 9: torch.bool}


def _dtype(code: int, ctx: dict) -> torch.dtype:
    if code in _FLOAT_CODES:
        return ctx["float"]
    try:
        return _DTYPES[code]
    except KeyError:
        raise OnnxGraphError(f"ONNX element type {code} is not supported") from None


def _tensor(arr: np.ndarray, float_dtype: torch.dtype) -> torch.Tensor:
    # np.array, not np.ascontiguousarray: the latter turns a 0-d scalar into shape (1,).
    dt: type
    if arr.dtype.kind == "f":
        dt = np.float64 if float_dtype == torch.float64 else np.float32
    else:
        dt = np.bool_ if arr.dtype == np.bool_ else np.int64
    return torch.from_numpy(np.array(arr, dtype=dt, copy=True))


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.sqrt(x.contiguous().numpy()))


def _ints(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t.reshape(-1).tolist()]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


# ------------------------------------------------------------------ operators
# Each takes (inputs, attributes, context) and returns a tuple of outputs. Inputs that the graph
# leaves empty ('' names) arrive as None.


def _unsqueeze(x, axes):
    rank = x.dim() + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        x = x.unsqueeze(a)
    return x


def _squeeze(x, axes):
    if axes is None:
        return x.squeeze()
    for a in sorted((_axis(a, x.dim()) for a in axes), reverse=True):
        x = x.squeeze(a)
    return x


def _slice(x, starts, ends, axes, steps):
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, x.dim())
        n = x.shape[a]
        if st == 0:
            raise OnnxGraphError("Slice: step 0")
        idx = range(n)[slice(s, e, st)]  # Python's slice clamps exactly as ONNX specifies
        if st == 1:
            x = x.narrow(a, idx.start, len(idx)) if len(idx) else x.narrow(a, 0, 0)
        else:
            x = x.index_select(a, torch.tensor(list(idx), dtype=torch.int64))
    return x


def _reshape(x, shape):
    shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]  # allowzero=0
    return x.reshape(shape)


def _gather(x, idx, axis):
    axis = _axis(axis, x.dim())
    n = x.shape[axis]
    i = torch.where(idx < 0, idx + n, idx)
    out = x.index_select(axis, i.reshape(-1))
    return out.reshape(tuple(x.shape[:axis]) + tuple(idx.shape) + tuple(x.shape[axis + 1 :]))


def _pad(x, pads, value):
    r = x.dim()
    begin, end = pads[:r], pads[r:]
    torch_pads: list[int] = []
    for d in reversed(range(r)):  # torch wants the last dimension first
        torch_pads += [begin[d], end[d]]
    return F.pad(x, torch_pads, mode="constant", value=float(value))


# Above this many output frames a convolution runs as one matrix product per kernel tap on a
# strided view of the input (no im2col copy): 2.8x faster for the vocoder's 32-channel layers at
# the sample rate, where torch's dilated im2col dominates. Either way a fixed order of GEMMs.
_TAPS_MIN_FRAMES = 2048


def _conv_taps(x, w, pad, dil):
    out_ch, _, k = w.shape
    outs = []
    for xb in x:
        xp = F.pad(xb, [pad, pad])
        n = xp.shape[1] - dil * (k - 1)
        y = torch.mm(w[:, :, 0], xp[:, 0:n])
        for j in range(1, k):
            y.addmm_(w[:, :, j], xp[:, j * dil : j * dil + n])
        outs.append(y)
    return torch.stack(outs)


def _conv(x, w, b, at):
    if w.dim() != 3:
        raise OnnxGraphError(f"Conv: only 1-D convolutions are supported (weight {tuple(w.shape)})")
    p = at.get("pads", [0, 0])
    if p[0] != p[1]:
        x, p = F.pad(x, [p[0], p[1]]), [0, 0]
    stride, dil, groups = at.get("strides", [1])[0], at.get("dilations", [1])[0], at.get("group", 1)
    if stride == 1 and groups == 1 and x.shape[-1] >= _TAPS_MIN_FRAMES:
        y = _conv_taps(x, w, p[0], dil)
        return y if b is None else y + b[:, None]
    return F.conv1d(x, w, b, stride=stride, padding=p[0], dilation=dil, groups=groups)


def _conv_transpose(x, w, b, at):
    if w.dim() != 3 or "output_shape" in at:
        raise OnnxGraphError("ConvTranspose: only 1-D transposed convolutions without output_shape")
    p = at.get("pads", [0, 0])
    if p[0] != p[1]:
        raise OnnxGraphError(f"ConvTranspose: asymmetric pads {p}")
    return F.conv_transpose1d(
        x,
        w,
        b,
        stride=at.get("strides", [1])[0],
        padding=p[0],
        output_padding=at.get("output_padding", [0])[0],
        groups=at.get("group", 1),
        dilation=at.get("dilations", [1])[0],
    )


def _div(a, b):
    if a.is_floating_point() or b.is_floating_point():
        return a / b
    return torch.div(a, b, rounding_mode="trunc")  # ONNX integer division truncates


def _pow(a, b):
    # x**2 is one IEEE multiplication (exact and portable); anything else goes through pow.
    if b.numel() == 1 and float(b) == 2.0:
        return a * a
    return torch.pow(a, b)


def _scatter_nd(data, idx, upd):
    out = data.clone()
    k = idx.shape[-1]
    cols = tuple(idx[..., j] for j in range(k))
    out[cols] = upd
    return out


def _gather_nd(data, idx):
    k = idx.shape[-1]
    return data[tuple(idx[..., j] for j in range(k))]


def _expand(x, shape):
    return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(shape))).contiguous()


def _random_normal_like(x, at, ctx):
    gen = ctx.get("generator")
    if gen is None:
        # Without a seeded generator the graph's noise is scaled by zero (Piper with
        # noise_scale = noise_w = 0): zeros are what the multiplication would give.
        return torch.zeros(x.shape, dtype=ctx["float"])
    return torch.randn(x.shape, dtype=ctx["float"], generator=gen)


def _reduce(fn, x, axes, keepdims):
    if axes is None:
        axes = list(range(x.dim()))
    axes = [_axis(a, x.dim()) for a in axes]
    return fn(x, dim=axes, keepdim=bool(keepdims))


OPS: dict[str, Callable] = {
    "Add": lambda i, a, c: (i[0] + i[1],),
    "Sub": lambda i, a, c: (i[0] - i[1],),
    "Mul": lambda i, a, c: (i[0] * i[1],),
    "Div": lambda i, a, c: (_div(i[0], i[1]),),
    "Pow": lambda i, a, c: (_pow(i[0], i[1]),),
    "Neg": lambda i, a, c: (-i[0],),
    "Sqrt": lambda i, a, c: (_sqrt(i[0]),),
    "Exp": lambda i, a, c: (torch.exp(i[0]),),
    "Erf": lambda i, a, c: (torch.erf(i[0]),),
    "Tanh": lambda i, a, c: (torch.tanh(i[0]),),
    "Sigmoid": lambda i, a, c: (torch.sigmoid(i[0]),),
    "Relu": lambda i, a, c: (torch.relu(i[0]),),
    "LeakyRelu": lambda i, a, c: (F.leaky_relu(i[0], a.get("alpha", 0.01)),),
    "Softplus": lambda i, a, c: (F.softplus(i[0]),),
    "Ceil": lambda i, a, c: (torch.ceil(i[0]),),
    "Clip": lambda i, a, c: (torch.clamp(i[0], i[1] if len(i) > 1 else None, i[2] if len(i) > 2 else None),),
    "Equal": lambda i, a, c: (i[0] == i[1],),
    "Less": lambda i, a, c: (i[0] < i[1],),
    "LessOrEqual": lambda i, a, c: (i[0] <= i[1],),
    "GreaterOrEqual": lambda i, a, c: (i[0] >= i[1],),
    "And": lambda i, a, c: (i[0] & i[1],),
    "Not": lambda i, a, c: (~i[0],),
    "Where": lambda i, a, c: (torch.where(i[0], i[1], i[2]),),
    "Cast": lambda i, a, c: (i[0].to(_dtype(a["to"], c)),),
    "Shape": lambda i, a, c: (torch.tensor(list(i[0].shape), dtype=torch.int64),),
    "ConstantOfShape": lambda i, a, c: (
        torch.full(_ints(i[0]), a["value"].reshape(-1)[0].item(), dtype=a["value"].dtype)
        if "value" in a
        else torch.zeros(_ints(i[0]), dtype=c["float"]),
    ),
    "Range": lambda i, a, c: (torch.arange(i[0].item(), i[1].item(), i[2].item(), dtype=i[0].dtype),),
    "Unsqueeze": lambda i, a, c: (_unsqueeze(i[0], _ints(i[1])),),
    "Squeeze": lambda i, a, c: (_squeeze(i[0], _ints(i[1]) if len(i) > 1 and i[1] is not None else None),),
    "Slice": lambda i, a, c: (
        _slice(
            i[0],
            _ints(i[1]),
            _ints(i[2]),
            _ints(i[3]) if len(i) > 3 and i[3] is not None else None,
            _ints(i[4]) if len(i) > 4 and i[4] is not None else None,
        ),
    ),
    "Reshape": lambda i, a, c: (_reshape(i[0], _ints(i[1])),),
    "Transpose": lambda i, a, c: (i[0].permute(a.get("perm", list(reversed(range(i[0].dim()))))),),
    "Concat": lambda i, a, c: (torch.cat(list(i), dim=a["axis"]),),
    "Gather": lambda i, a, c: (_gather(i[0], i[1], a.get("axis", 0)),),
    "GatherElements": lambda i, a, c: (
        torch.gather(
            i[0],
            _axis(a.get("axis", 0), i[0].dim()),
            torch.where(i[1] < 0, i[1] + i[0].shape[_axis(a.get("axis", 0), i[0].dim())], i[1]),
        ),
    ),
    "GatherND": lambda i, a, c: (_gather_nd(i[0], i[1]),),
    "ScatterND": lambda i, a, c: (_scatter_nd(i[0], i[1], i[2]),),
    "NonZero": lambda i, a, c: (torch.nonzero(i[0]).T.contiguous(),),
    "Expand": lambda i, a, c: (_expand(i[0], _ints(i[1])),),
    "Pad": lambda i, a, c: (
        _pad(i[0], _ints(i[1]), i[2].item() if len(i) > 2 and i[2] is not None else 0.0),
    ),
    "Split": lambda i, a, c: tuple(torch.split(i[0], _ints(i[1]), dim=a.get("axis", 0))),
    "CumSum": lambda i, a, c: (torch.cumsum(i[0], dim=int(i[1].item())),),
    "MatMul": lambda i, a, c: (torch.matmul(i[0], i[1]),),
    "Conv": lambda i, a, c: (_conv(i[0], i[1], i[2] if len(i) > 2 else None, a),),
    "ConvTranspose": lambda i, a, c: (_conv_transpose(i[0], i[1], i[2] if len(i) > 2 else None, a),),
    "Softmax": lambda i, a, c: (torch.softmax(i[0], dim=a.get("axis", -1)),),
    "ReduceMean": lambda i, a, c: (_reduce(torch.mean, i[0], a.get("axes"), a.get("keepdims", 1)),),
    "ReduceSum": lambda i, a, c: (
        _reduce(
            torch.sum, i[0], _ints(i[1]) if len(i) > 1 and i[1] is not None else None, a.get("keepdims", 1)
        ),
    ),
    "ReduceMax": lambda i, a, c: (
        torch.amax(
            i[0],
            dim=[_axis(x, i[0].dim()) for x in a.get("axes", range(i[0].dim()))],
            keepdim=bool(a.get("keepdims", 1)),
        ),
    ),
    "RandomNormalLike": lambda i, a, c: (_random_normal_like(i[0], a, c),),
}


class OnnxGraph:
    """An ONNX model's graph, ready to run on torch: `graph.run(inputs) -> outputs`. Every float
    tensor (weights, constants, casts) is `dtype`; feed float inputs in it too."""

    def __init__(self, path: str | Path, dtype: torch.dtype = torch.float32):
        self.dtype = dtype
        try:
            import onnx
            from onnx import helper, numpy_helper
        except ImportError as err:  # a declared dependency; this names it if the venv lacks it
            raise OnnxGraphError(f"{path}: the onnx package is needed to read the model ({err})") from None
        self.path = Path(path)
        try:
            model = onnx.load(str(self.path))
        except Exception as err:  # noqa: BLE001 (onnx raises several unrelated types)
            raise OnnxGraphError(
                f"{self.path}: not a readable ONNX model ({type(err).__name__}: {err})"
            ) from None
        g = model.graph
        self.inputs = [i.name for i in g.input]
        self.outputs = [o.name for o in g.output]
        self.consts: dict[str, torch.Tensor] = {
            t.name: _tensor(numpy_helper.to_array(t), dtype) for t in g.initializer
        }
        self.nodes: list[tuple[str, str, list[str], list[str], dict]] = []
        for k, n in enumerate(g.node):
            if n.op_type not in OPS and n.op_type != "Constant":
                raise OnnxGraphError(
                    f"{self.path}: node {k} ({n.name or n.op_type}) uses operator {n.op_type}, "
                    "which the portable runner does not implement"
                )
            at = {}
            for a in n.attribute:
                v = helper.get_attribute_value(a)
                if isinstance(v, onnx.TensorProto):
                    v = _tensor(numpy_helper.to_array(v), dtype)
                elif isinstance(v, bytes):
                    v = v.decode()
                at[a.name] = v
            if n.op_type == "Constant":
                self.consts[n.output[0]] = at["value"]
                continue
            self.nodes.append((n.name or f"node{k}", n.op_type, list(n.input), list(n.output), at))

    def run(
        self, feeds: dict[str, torch.Tensor], generator: torch.Generator | None = None
    ) -> list[torch.Tensor]:
        env: dict[str, torch.Tensor | None] = {**self.consts, **feeds, "": None}
        missing = [n for n in self.inputs if n not in env]
        if missing:
            raise OnnxGraphError(f"{self.path}: missing graph input(s) {missing}")
        ctx = {"generator": generator, "float": self.dtype}
        for name, op, ins, outs, at in self.nodes:
            try:
                res = OPS[op]([env[i] for i in ins], at, ctx)
            except OnnxGraphError as err:
                raise OnnxGraphError(f"{self.path}: node {name}: {err}") from None
            except (RuntimeError, IndexError, ValueError, KeyError, TypeError) as err:
                raise OnnxGraphError(
                    f"{self.path}: node {name} ({op}): {type(err).__name__}: {err}"
                ) from None
            for o, v in zip(outs, res):
                env[o] = v
        return [env[o] for o in self.outputs]  # type: ignore[misc]
