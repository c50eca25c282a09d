"""PyTorch drop-in for nn.ConvTranspose3d backed by convt3d (ctypes: no compiled extension).

    import convt3d.torch as ct
    layer = ct.ConvTranspose3d(32, 16, kernel_size=3, stride=2, padding=1).cuda()
    y = layer(x)                      # same parameters, init and state_dict as nn.ConvTranspose3d
    y = ct.conv_transpose3d(x, w, b, stride=2, padding=1)   # functional form
    ct.convert_model(model)           # swap every nn.ConvTranspose3d in place

Behaviour:

* CUDA tensors run convt3d's kernels on the tensor's device and on PyTorch's current stream.
  float32, float64, bfloat16 and float16 all run native kernels and return the input's dtype.
  bfloat16/float16 are 16-bit in and out with fp32 accumulation: relative L2 error <= 1e-2
  against fp64 on the same (rounded) inputs. Inputs are made contiguous and, if not 16-byte
  aligned, copied (the tensor-core kernels read float32 inputs with 16-byte copies), so any
  tensor works.
* ``precision`` applies to float32 tensors only: "fp32" (strict fp32: no TF32, <= 1e-6),
  "fp32x3" (3xTF32 tensor cores, <= 1e-5) or "tf32" (<= 1e-3, what PyTorch allows cuDNN by
  default). float64 is always strict and 16-bit tensors always accumulate in fp32, whatever
  the precision. "bf16"/"fp16" are not precisions (ValueError): pass bfloat16/float16 tensors.
* Tensors on any other device (CPU included) fall back to torch.nn.functional.conv_transpose3d,
  so converted models still run on CPU; the argument checks are the same on every device.
* The first call for a given (shape, dtype, device) creates a plan: a hit in the SQLite cache
  shared with the C++ library and the ``convt3d`` CLI (``$CONVT3D_CACHE`` or
  ~/.cache/convt3d/cache.sqlite), else tuning (seconds to minutes, once per shape and GPU) per
  the policy (``configure`` or ``$CONVT3D_POLICY``). Plans are cached in this process, so later
  calls only launch a kernel.
* The op is the custom operator ``torch.ops.convt3d.conv_transpose3d`` with a fake (meta)
  implementation, so it works under torch.compile(fullgraph=True), and with autograd: the
  backward uses PyTorch's own convolution_backward (cuDNN on GPU). Eager CUDA calls that
  nothing could observe (no autograd graph, torch.compile, jit.trace, __torch_function__ or
  __torch_dispatch__ mode, functorch transform, forward-mode AD, profiler or tensor subclass)
  skip the op's Python dispatch and run the same code directly: the same result with less host
  time. ``configure(direct_eager=False)`` (or ``$CONVT3D_DIRECT_EAGER=0``) keeps the op always.
* CUDA graphs: a captured call only launches, but the first call for each shape must happen
  before capture (it may tune); calling a new shape during capture raises RuntimeError.
* Weights are packed once, not per call: plans that re-lay the weights (tensor-core, Winograd
  and FFT kernels) do it again only when the weight tensor or its version counter
  (``Tensor._version``, bumped by every in-place change PyTorch sees: optimizer steps,
  ``copy_`` under no_grad, ``load_state_dict``) changes. Writes PyTorch does not count (through
  ``weight.data``, DLPack or your own kernels) are not seen: then call
  ``configure(weight_versions=False)`` (or set ``$CONVT3D_WEIGHT_VERSIONS=0``) to re-lay the
  weights on every call, as before.

Needs PyTorch >= 2.1; torch.compile support needs torch.library.custom_op (PyTorch >= 2.4).
On older versions the op is an autograd.Function that runs eagerly (compile graph-breaks).
"""

import atexit
import inspect
import itertools
import os
import threading
import weakref
from typing import Dict, List, Optional, Sequence, Tuple, Union

try:
    import torch
except ModuleNotFoundError as _e:  # only this module needs PyTorch; `import convt3d` does not
    raise ImportError(
        "convt3d.torch needs PyTorch >= 2.1, which is not installed: pip install torch "
        "(or pip install 'convt3d[torch]'); the C API binding `convt3d` works without it"
    ) from _e
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from . import _lib

__all__ = [
    "ConvTranspose3d",
    "clear_plans",
    "configure",
    "conv_transpose3d",
    "convert_model",
    "plans",
]

_IntOrTriple = Union[int, Sequence[int]]
# CUDA dtypes with native kernels, and the Problem dtype of each. Nothing is upcast any more:
# bfloat16 and float16 have their own kernels (fp32 accumulation).
_NATIVE = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
}
_POSITIONS = {
    "input": 1,
    "weight": 2,
    "bias": 3,
    "stride": 4,
    "padding": 5,
    "output_padding": 6,
    "groups": 7,
    "dilation": 8,
}
_SCHEMA = (
    "(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
    "int[] output_padding, int groups, int[] dilation, str precision) -> Tensor"
)
OP_NAME = "convt3d::conv_transpose3d"


# ---- Configuration and plan cache -------------------------------------------------------------
class _Config:
    def __init__(self) -> None:
        self.policy = os.environ.get("CONVT3D_POLICY", "tune_if_missing")
        self.cache_path: Optional[str] = None  # None: the library's default / $CONVT3D_CACHE
        self.verbose = os.environ.get("CONVT3D_VERBOSE", "") not in ("", "0")
        self.max_candidates = 0
        self.weight_versions = os.environ.get("CONVT3D_WEIGHT_VERSIONS", "1") != "0"
        self.vendor_candidates = True  # the library also honours $CONVT3D_VENDOR_CANDIDATES=0
        self.fp32x3_fp16 = False  # the library also honours $CONVT3D_FP32X3_FP16=1
        self.direct_eager = os.environ.get("CONVT3D_DIRECT_EAGER", "1") != "0"


_config = _Config()
_lock = threading.Lock()
_engines: Dict[Tuple[int, str], _lib.Engine] = {}
_plans: Dict[Tuple[_lib.Problem, int, str], _lib.Plan] = {}
# Problems by (shapes, arguments, bias, dtype): made once per distinct call.
_problems: Dict[tuple, _lib.Problem] = {}


@atexit.register
def _stop_background_tuning() -> None:
    """Joins the engines' background tuning threads before the interpreter tears down (an
    engine's destructor stops its worker between candidates); every finished entry is stored."""
    with _lock:
        engines = list(_engines.values())
        _engines.clear()
        _plans.clear()
    for engine in engines:
        engine.close()


def configure(
    *,
    policy: Optional[str] = None,
    cache_path: Optional[str] = None,
    verbose: Optional[bool] = None,
    max_candidates: Optional[int] = None,
    weight_versions: Optional[bool] = None,
    vendor_candidates: Optional[bool] = None,
    fp32x3_fp16: Optional[bool] = None,
    direct_eager: Optional[bool] = None,
) -> None:
    """Sets how plans are made from now on, and forgets the plans made so far.

    policy: "tune_if_missing" (default; ``$CONVT3D_POLICY`` overrides the default), "never"
    (heuristic kernel, no cache), "cache_or_heuristic" (never tunes), "exhaustive" or
    "background" (the first call runs the best stored fallback or the heuristic pick at once
    while a worker thread tunes the shape; later calls run the winner).
    cache_path: the SQLite file; "" restores the default ($CONVT3D_CACHE, else
    ~/.cache/convt3d/cache.sqlite, the same file the C++ library and the CLI use); ":memory:"
    keeps results in this process. verbose: tuning progress on stderr. max_candidates: cap on
    the candidates timed when tuning (0: all). weight_versions: True (default;
    ``$CONVT3D_WEIGHT_VERSIONS=0`` turns it off) re-lays a plan's weights only when the weight
    tensor or its ``_version`` changes; False re-lays them on every call (for weights changed
    behind PyTorch's back, e.g. through ``.data``). vendor_candidates: True (default;
    ``$CONVT3D_VENDOR_CANDIDATES=0`` turns it off) lets cuDNN's backward-data algorithms compete
    with ours when tuning, where cuDNN loads (PyTorch's own cuDNN is found), under the same
    correctness gate; a plan whose winner is cuDNN runs cuDNN (kernel "cudnn:ALGO_1"). False
    tunes our kernels alone (cached apart). fp32x3_fp16: False (default;
    ``$CONVT3D_FP32X3_FP16=1`` turns it on) keeps precision="fp32x3" on 3xTF32; True also offers
    the scaled 3xFP16 tiles (about 1.5-1.7x faster on dense strided layers, cached apart), whose
    1e-5 contract holds unless an operand's largest values exceed about 2^22 times its RMS
    without dominating the output (see the README). direct_eager: True (default;
    ``$CONVT3D_DIRECT_EAGER=0`` turns it off) runs an eager call on CUDA tensors straight to
    the kernel, skipping the custom op's Python dispatch (most of a small layer's host time),
    when nothing could observe the op: no autograd graph, forward-mode AD, torch.compile or
    jit.trace, function or dispatch mode, functorch transform, profiler or tensor subclass.
    False sends every call through ``torch.ops.convt3d.conv_transpose3d``. Must not be called
    during CUDA graph capture.
    """
    if policy is not None and policy not in _lib.POLICIES:
        raise ValueError(f"convt3d: policy must be one of {list(_lib.POLICIES)}, got {policy!r}")
    if max_candidates is not None and max_candidates < 0:
        raise ValueError(f"convt3d: max_candidates must be >= 0, got {max_candidates}")
    with _lock:
        if policy is not None:
            _config.policy = policy
        if cache_path is not None:
            _config.cache_path = cache_path or None
        if verbose is not None:
            _config.verbose = verbose
        if max_candidates is not None:
            _config.max_candidates = max_candidates
        if weight_versions is not None:
            _config.weight_versions = bool(weight_versions)
        if vendor_candidates is not None:
            _config.vendor_candidates = bool(vendor_candidates)
        if fp32x3_fp16 is not None:
            _config.fp32x3_fp16 = bool(fp32x3_fp16)
        if direct_eager is not None:
            _config.direct_eager = bool(direct_eager)
        _engines.clear()
        _plans.clear()


def clear_plans() -> None:
    """Forgets this process's plans (the SQLite cache keeps its entries)."""
    with _lock:
        _plans.clear()


def plans() -> List[Dict[str, object]]:
    """The plans made in this process: device, precision, problem, kernel, source, origin,
    tuned ms.

    precision is the engine's; it only matters for f32 problems ("fp32" for the others). origin
    is the lookup tier that served the plan ({"tier", "name", "reason"}: 0 tuned, 1 exact cache
    entry, 2 same GPU model under another version, 3 same architecture, 4 nearest tuned shape,
    5 heuristic; the reason says why the better tiers missed). A "background" plan's kernel and
    origin change once its winner is tuned and it has run again.
    """
    with _lock:
        items = list(_plans.items())
    return [
        {
            "device": dev,
            "precision": prec,
            "problem": prob,
            "kernel": plan.kernel_name,
            "source": plan.source,
            "origin": plan.origin,
            "tuned_ms": plan.tuned_ms,
        }
        for (prob, dev, prec), plan in items
    ]


def _engine(device: int, precision: str) -> _lib.Engine:
    key = (device, precision)
    engine = _engines.get(key)
    if engine is None:
        engine = _lib.Engine(
            policy=_config.policy,
            precision=precision,
            cache_path=_config.cache_path,
            device=device,
            max_candidates=_config.max_candidates,
            verbose=_config.verbose,
            vendor_candidates=_config.vendor_candidates,
            fp32x3_fp16=_config.fp32x3_fp16,
        )
        _engines[key] = engine
    return engine


def _plan(problem: _lib.Problem, device: int, precision: str) -> _lib.Plan:
    key = (problem, device, precision)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    # Planning may tune (legacy default stream, synchronisation, its own device memory): all
    # illegal during capture, and it would poison the capture. Fail clearly instead.
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"convt3d: no plan yet for {problem} on cuda:{device} and a CUDA graph is being "
            "captured; call the layer once with this input shape (and dtype) before capture: "
            "plans are created outside capture, a captured call only launches"
        )
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            with torch.cuda.device(device):
                engine = _engine(device, precision)
                try:
                    plan = engine.plan(problem)
                except _lib.Convt3dError as e:
                    # Tuning allocates outside PyTorch's caching allocator: give it the cached
                    # blocks and try once more.
                    if "out of memory" not in str(e).lower():
                        raise
                    torch.cuda.empty_cache()
                    plan = engine.plan(problem)
            _plans[key] = plan
    return plan


# Weight identities for the plans' packed weights: a number per live weight tensor object, kept
# here (not on the tensor, so deepcopy, pickling and state_dict never carry it), so that a new
# tensor at a freed one's address (same data_ptr, same _version) never matches an old packing.
_weight_counter = itertools.count(1)
_weight_ids: Dict[int, Tuple["weakref.ref[Tensor]", int]] = {}


def _weight_identity(w: Tensor) -> int:
    entry = _weight_ids.get(id(w))
    if entry is not None and entry[0]() is w:
        return entry[1]
    wid = next(_weight_counter)
    key = id(w)
    _weight_ids[key] = (weakref.ref(w, lambda _ref, key=key: _weight_ids.pop(key, None)), wid)
    return wid


def _weight_version(w: Tensor) -> Optional[int]:
    """The 64-bit version the library keys a plan's packed weights by (with w's data_ptr): w's
    identity in the high 32 bits, its in-place version counter in the low 32. None: pack on
    every call."""
    if not _config.weight_versions:
        return None
    try:
        version = w._version  # inference tensors have no version counter: RuntimeError
        wid = _weight_identity(w)
    except (RuntimeError, TypeError):  # then pack on every call
        return None
    return ((wid & 0xFFFFFFFF) << 32) | (version & 0xFFFFFFFF)


# ---- Argument checks (shared by every device and by tracing) ----------------------------------
def _triple(name: str, value: _IntOrTriple) -> Tuple[int, int, int]:
    pos = _POSITIONS[name]
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return (value, value, value)
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, torch.Size)):
        raise TypeError(
            f"conv_transpose3d(): argument '{name}' (position {pos}) must be tuple of ints, "
            f"not {type(value).__name__}"
        )
    for i, v in enumerate(value):
        if not isinstance(v, (int, torch.SymInt)) or isinstance(v, bool):
            raise TypeError(
                f"conv_transpose3d(): argument '{name}' (position {pos}) must be tuple of ints, "
                f"but found element of type {type(v).__name__} at pos {i}"
            )
    if len(value) == 1:
        return (value[0], value[0], value[0])
    if len(value) != 3:
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of 3 values to match the "
            f"convolution dimensions, but got {name}={list(value)}"
        )
    return (value[0], value[1], value[2])


def _check_precision(precision: str) -> None:
    if not isinstance(precision, str):
        raise TypeError(f"convt3d: precision must be a str, got {type(precision).__name__}")
    _lib.precision_code(precision)


def _out_size(
    in_size: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    output_padding: Sequence[int],
    dilation: Sequence[int],
) -> List[int]:
    return [
        (in_size[i] - 1) * stride[i]
        - 2 * padding[i]
        + dilation[i] * (kernel[i] - 1)
        + output_padding[i]
        + 1
        for i in range(3)
    ]


def _out_shape(
    input: Tensor,
    weight: Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
    dilation: Sequence[int],
) -> List[int]:
    """The op's output shape [N, C_out, D_out, H_out, W_out] (no checks)."""
    out = _out_size(input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation)
    return [input.shape[0], weight.shape[1] * groups, *out]


def _check_args(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: Tuple[int, int, int],
    padding: Tuple[int, int, int],
    output_padding: Tuple[int, int, int],
    groups: int,
    dilation: Tuple[int, int, int],
) -> None:
    """PyTorch's checks with PyTorch's exception types (RuntimeError), on a 5-D input."""
    if weight.dim() != 5:
        raise RuntimeError(
            "conv_transpose3d: expected weight to be 5-D [C_in, C_out/groups, kD, kH, kW], but "
            f"got weight of size {list(weight.shape)}"
        )
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    # min() rather than any(generator): the simplest form for torch.compile to trace.
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(padding) < 0:
        raise RuntimeError("negative padding is not supported")
    if min(output_padding) < 0:
        raise RuntimeError("negative output_padding is not supported")
    if min(dilation) <= 0:
        raise RuntimeError("dilation should be greater than zero")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.device != input.device:
            raise RuntimeError(
                f"conv_transpose3d: expected all tensors to be on the same device, but {name} "
                f"is on {t.device} and input is on {input.device}"
            )
        if t.dtype != input.dtype:
            raise RuntimeError(
                f"conv_transpose3d: input type ({input.dtype}) and {name} type ({t.dtype}) "
                "should be the same"
            )
    if input.device.type == "cuda" and input.dtype not in _NATIVE:
        raise RuntimeError(
            f"convt3d.conv_transpose3d: input dtype {input.dtype} is not supported on CUDA "
            "(float32, float64, bfloat16, float16)"
        )
    if weight.shape[0] % groups != 0:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0,"
            f" but got weight of size {list(weight.shape)} instead"
        )
    if input.shape[1] != weight.shape[0]:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
            f"{list(input.shape)} to have {weight.shape[0]} channels, but got {input.shape[1]} "
            "channels instead"
        )
    c_out = weight.shape[1] * groups
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != c_out):
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected bias to be "
            f"1-dimensional with {c_out} elements, but got bias of size {list(bias.shape)} "
            "instead"
        )
    if min(input.shape[2], input.shape[3], input.shape[4]) <= 0:
        raise RuntimeError(
            "Expected input's non-batch dimensions to have positive length, but input has a "
            f"shape of {list(input.shape)}"
        )
    for i in range(3):
        if output_padding[i] >= stride[i] and output_padding[i] >= dilation[i]:
            raise RuntimeError(
                "output padding must be smaller than either stride or dilation, but got "
                f"output_padding={list(output_padding)}, stride={list(stride)}, "
                f"dilation={list(dilation)}"
            )
    out = _out_size(input.shape[2:], weight.shape[2:], stride, padding, output_padding, dilation)
    if min(out) <= 0:
        raise RuntimeError(
            f"Given input size per channel: ({' x '.join(str(v) for v in input.shape[2:])}). "
            f"Calculated output size per channel: ({' x '.join(str(v) for v in out)}). "
            "Output size is too small"
        )


# ---- The operator -----------------------------------------------------------------------------
def _forward_cuda(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: Sequence[int],
    padding: Sequence[int],
    output_padding: Sequence[int],
    groups: int,
    dilation: Sequence[int],
    precision: str,
) -> Tensor:
    dtype = _NATIVE[input.dtype]  # _check_args refused the others
    # The precision is a contract for float32 only (f64 is strict, 16-bit accumulates in fp32):
    # other dtypes share one engine and one plan whatever precision the caller passed.
    if dtype != "f32":
        precision = "fp32"
    shape = _out_shape(input, weight, stride, padding, output_padding, groups, dilation)
    if input.shape[0] == 0:  # PyTorch allows an empty batch; the library needs n > 0
        return input.new_empty(shape)

    def prepared(t: Tensor) -> Tensor:
        t = t.contiguous()
        # Views with a storage offset can be misaligned; the kernels may use vector loads (the
        # 16-bit tensor-core kernel copies the input in 4-byte pairs). A fresh copy comes from
        # the caching allocator, whose blocks are 512-byte aligned.
        return t if t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)

    x, w = prepared(input), prepared(weight)
    b = prepared(bias) if bias is not None else None
    # The Problem of these shapes and arguments, made once (building one is most of a small
    # layer's host time after the plan lookup).
    key = (tuple(x.shape), tuple(w.shape), tuple(stride), tuple(padding), tuple(output_padding),
           groups, tuple(dilation), b is not None, dtype)
    problem = _problems.get(key)
    if problem is None:
        problem = _lib.problem_from_shapes(
            x.shape,
            w.shape,
            stride,
            padding,
            output_padding,
            groups,
            dilation,
            bias=b is not None,
            dtype=dtype,
        )
        _problems[key] = problem
    device = input.device.index if input.device.index is not None else torch.cuda.current_device()
    plan = _plan(problem, device, precision)
    if device != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _run(plan, x, w, b, shape, device)
    return _run(plan, x, w, b, shape, device)


def _run(plan: _lib.Plan, x: Tensor, w: Tensor, b: Optional[Tensor], shape, device: int) -> Tensor:
    """Runs plan on PyTorch's current stream of device (the current device) into a new y."""
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    stream = torch.cuda.current_stream(device).cuda_stream
    plan.run(x.data_ptr(), w.data_ptr(), b.data_ptr() if b is not None else 0, y.data_ptr(),
             stream, _weight_version(w))
    return y


def _native_cuda(t: Tensor) -> bool:
    """Whether t is on a CUDA device of an NVIDIA build: what convt3d's kernels compute."""
    return t.device.type == "cuda" and torch.version.hip is None


def _impl(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: List[int],
    padding: List[int],
    output_padding: List[int],
    groups: int,
    dilation: List[int],
    precision: str,
) -> Tensor:
    if not _native_cuda(input):
        # Documented fallback: CPU (and any non-NVIDIA device) uses PyTorch's own kernel.
        return F.conv_transpose3d(
            input, weight, bias, stride, padding, output_padding, groups, dilation
        )
    return _forward_cuda(
        input, weight, bias, stride, padding, output_padding, groups, dilation, precision
    )


def _fake(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    """_impl's output without computing it (arguments as _impl's): FakeTensor and meta tensors."""
    return input.new_empty(
        _out_shape(input, weight, stride, padding, output_padding, groups, dilation)
    )


def _setup_context(ctx, inputs, output) -> None:
    input, weight, bias, stride, padding, output_padding, groups, dilation, _ = inputs
    ctx.save_for_backward(input, weight)
    ctx.conv = (list(stride), list(padding), list(output_padding), groups, list(dilation))
    ctx.bias_sizes = None if bias is None else list(bias.shape)


def _backward(ctx, grad_output: Tensor):
    """grad_input, grad_weight, grad_bias of y = conv_transpose3d(x, w, b).

    PyTorch's own convolution_backward with transposed=True: the adjoint of a transposed
    convolution is conv3d(grad_output, w) cropped to the input size (the crop matters when
    output_padding >= stride, which dilation allows), and grad_weight is conv3d's weight
    gradient with the roles of input and grad_output swapped; aten does both exactly, on cuDNN
    for CUDA tensors.
    """
    input, weight = ctx.saved_tensors
    stride, padding, output_padding, groups, dilation = ctx.conv
    mask = [
        ctx.needs_input_grad[0],
        ctx.needs_input_grad[1],
        ctx.bias_sizes is not None and ctx.needs_input_grad[2],
    ]
    grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
        grad_output.to(input.dtype),
        input,
        weight,
        ctx.bias_sizes,
        stride,
        padding,
        dilation,
        True,
        output_padding,
        groups,
        mask,
    )
    return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


def _has_custom_op() -> bool:
    fn = getattr(torch.library, "custom_op", None)
    if fn is None:
        return False
    try:  # the released API (2.4+) takes schema=; earlier previews named things differently
        return "schema" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


HAS_CUSTOM_OP = _has_custom_op()

if HAS_CUSTOM_OP:
    try:
        _op = torch.library.custom_op(OP_NAME, _impl, mutates_args=(), schema=_SCHEMA)
    except RuntimeError:
        # Importing this module twice (e.g. importlib.reload) finds the op registered already.
        _op = getattr(torch.ops.convt3d, "conv_transpose3d")
    else:
        _op.register_fake(_fake)
        _op.register_autograd(_backward, setup_context=_setup_context)

    def _call(*args) -> Tensor:
        return _op(*args)

else:  # PyTorch 2.1 - 2.3: eager autograd.Function (torch.compile graph-breaks here)

    class _Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):  # type: ignore[override]
            _setup_context(ctx, args, None)
            return _impl(*args)

        @staticmethod
        def backward(ctx, grad_output):  # type: ignore[override]
            return _backward(ctx, grad_output)

    def _call(*args) -> Tensor:
        return _Function.apply(*args)


# ---- The direct eager path ---------------------------------------------------------------------
# custom_op's Python dispatch is most of a small layer's host time. Where nothing could observe
# the op, conv_transpose3d calls _forward_cuda itself: the code the op runs on CUDA tensors, so
# the same plan, kernel and result. Wherever something could observe it, the call keeps the op.
_PLAIN_TENSORS = (Tensor, nn.Parameter)
# Public since PyTorch 2.3 (so in every version with custom_op); None: no direct path.
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)


def _direct_allowed(input: Tensor, weight: Tensor, bias: Optional[Tensor]) -> bool:
    """True when this call may skip the custom op: nothing could observe or need it.

    False (the op) under torch.compile or export (asked first, so that tracing this guard folds
    it to False), with the autograd.Function of PyTorch < 2.4, after configure(
    direct_eager=False); while torch.jit.trace records; in any __torch_function__ or
    __torch_dispatch__ mode (the dispatch stack also counts infra modes such as FakeTensorMode);
    inside a functorch transform (vmap, grad, jvp, functionalize) or for a tensor one wrapped
    (exact torch.Tensor objects, so the type test misses them); inside a forward-mode AD level
    (dual tensors pass no_grad); while a profiler records (traces should show the op); when
    autograd would record (grad enabled and a tensor requiring grad); for any tensor that is not
    exactly a Tensor or Parameter (subclasses, FakeTensor, FunctionalTensor). Most of these are
    private queries: one that is missing or raises answers False, never an error. Inference mode
    is allowed: no graph either way, and _forward_cuda is the same code on both paths. The
    device is the caller's test (_native_cuda, as in _impl).
    """
    if not HAS_CUSTOM_OP or not _config.direct_eager or _is_compiling is None or _is_compiling():
        return False
    try:
        C = torch._C
        if (
            C._get_tracing_state() is not None
            or C._len_torch_function_stack() > 0
            or C._is_torch_function_mode_enabled()
            or C._len_torch_dispatch_stack() > 0
            or C._functorch.maybe_current_level() is not None
            or torch.autograd.forward_ad._current_level >= 0
            or torch.autograd._profiler_enabled()
        ):
            return False
        grad = torch.is_grad_enabled()
        wrapped = C._functorch.is_functorch_wrapped_tensor
        for t in (input, weight, bias):
            if t is None:
                continue
            if type(t) not in _PLAIN_TENSORS or wrapped(t) or (grad and t.requires_grad):
                return False
        return True
    except Exception:  # a private query missing or changed: the op is always right
        return False


def _autocast_dtype() -> Optional[torch.dtype]:
    """The CUDA autocast dtype while autocast is enabled, else None."""
    get_dtype = getattr(torch, "get_autocast_dtype", None)
    if get_dtype is not None:  # PyTorch >= 2.4
        return get_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: _IntOrTriple = 1,
    padding: _IntOrTriple = 0,
    output_padding: _IntOrTriple = 0,
    groups: int = 1,
    dilation: _IntOrTriple = 1,
    *,
    precision: str = "fp32",
) -> Tensor:
    """torch.nn.functional.conv_transpose3d computed by convt3d on CUDA tensors.

    Same arguments, shapes, results and errors as F.conv_transpose3d: input [N, C_in, D, H, W]
    (or unbatched [C_in, D, H, W]), weight [C_in, C_out/groups, kD, kH, kW], bias [C_out].
    float32, float64, bfloat16 and float16 run native kernels and return the input's dtype
    (bfloat16/float16: fp32 accumulation, relative L2 error <= 1e-2 against fp64). precision
    applies to float32 only: "fp32" (strict), "fp32x3" (3xTF32 tensor cores, fp32-grade) or
    "tf32"; other dtypes ignore it. "bf16"/"fp16" are not precisions (ValueError): pass
    bfloat16/float16 tensors. Non-contiguous or misaligned tensors are copied to contiguous
    ones. Tensors not on a CUDA device are computed by F.conv_transpose3d. Under torch.autocast,
    mixed input/weight dtypes are cast to the autocast dtype as PyTorch does; tensors of one
    dtype are computed in that dtype. The first call for a shape may tune (see configure); it
    must not happen during CUDA graph capture. An eager CUDA call that nothing could observe (no
    autograd graph, compile, trace, mode, transform or profiler) skips the custom op's dispatch
    and runs the same code directly; configure(direct_eager=False) turns that off.
    """
    _check_precision(precision)
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"conv_transpose3d(): argument '{name}' (position {_POSITIONS[name]}) must be "
                f"Tensor, not {type(t).__name__}"
            )
    if bias is not None and not isinstance(bias, Tensor):
        raise TypeError(
            f"conv_transpose3d(): argument 'bias' (position 3) must be Tensor, not "
            f"{type(bias).__name__}"
        )
    if not isinstance(groups, (int, torch.SymInt)) or isinstance(groups, bool):
        raise TypeError(
            f"conv_transpose3d(): argument 'groups' (position 7) must be int, not "
            f"{type(groups).__name__}"
        )
    s = _triple("stride", stride)
    p = _triple("padding", padding)
    op = _triple("output_padding", output_padding)
    d = _triple("dilation", dilation)
    if input.dim() not in (4, 5):
        raise RuntimeError(
            "Expected 4D (unbatched) or 5D (batched) input to conv_transpose3d, but got input of "
            f"size: {list(input.shape)}"
        )
    batched = input.dim() == 5
    x = input if batched else input.unsqueeze(0)
    if x.device.type == "cuda" and (
        weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype)
    ):
        # Under torch.autocast, F.conv_transpose3d casts mixed dtypes to the autocast dtype;
        # do the same. Only asked on a mismatch, so compiled graphs never trace the query.
        cast = _autocast_dtype()
        if cast is not None:
            x, weight = x.to(cast), weight.to(cast)
            bias = bias.to(cast) if bias is not None else None
    _check_args(x, weight, bias, s, p, op, groups, d)
    if _native_cuda(x) and _direct_allowed(x, weight, bias):
        y = _forward_cuda(x, weight, bias, s, p, op, groups, d, precision)
    else:
        y = _call(x, weight, bias, list(s), list(p), list(op), groups, list(d), precision)
    return y if batched else y.squeeze(0)


# ---- The module -------------------------------------------------------------------------------
class ConvTranspose3d(nn.ConvTranspose3d):
    """nn.ConvTranspose3d whose forward runs convt3d on CUDA tensors.

    A subclass of nn.ConvTranspose3d: same constructor, parameters (weight [C_in,
    C_out/groups, kD, kH, kW], bias [C_out]), default initialisation and state_dict, so
    checkpoints load both ways and isinstance checks still hold. Adds the keyword-only
    ``precision`` ("fp32", "fp32x3" or "tf32"; it applies when the module runs in float32).
    padding_mode must be "zeros", as for nn.ConvTranspose3d. See conv_transpose3d for dtypes,
    devices and the CPU fallback.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _IntOrTriple,
        stride: _IntOrTriple = 1,
        padding: _IntOrTriple = 0,
        output_padding: _IntOrTriple = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: _IntOrTriple = 1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
        *,
        precision: str = "fp32",
    ) -> None:
        _check_precision(precision)
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            output_padding=output_padding,
            groups=groups,
            bias=bias,
            dilation=dilation,
            padding_mode=padding_mode,
            device=device,
            dtype=dtype,
        )
        self.precision = precision

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError('Only "zeros" padding mode is supported for ConvTranspose3d')
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 3, self.dilation
        )
        return conv_transpose3d(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
            precision=getattr(self, "precision", "fp32"),
        )

    def extra_repr(self) -> str:
        s = super().extra_repr()
        precision = getattr(self, "precision", "fp32")
        return s if precision == "fp32" else f"{s}, precision={precision!r}"


def convert_model(model: nn.Module, *, precision: str = "fp32") -> nn.Module:
    """Makes every nn.ConvTranspose3d in ``model`` (itself included) a convt3d ConvTranspose3d.

    In place: each module's class is switched, so its parameters (the same Parameter objects,
    hence optimizers keep them), device, dtype, hooks and training flag stay as they are.
    Subclasses of nn.ConvTranspose3d (e.g. LazyConvTranspose3d or a user's own) are left alone,
    since they may override forward. Returns ``model``.
    """
    _check_precision(precision)
    for m in model.modules():
        if type(m) is nn.ConvTranspose3d:
            m.__class__ = ConvTranspose3d
            m.precision = precision
    return model
