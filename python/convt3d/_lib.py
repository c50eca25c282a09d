"""ctypes binding of libconvt3d.so's C API (include/convt3d/convt3d_c.h); needs no PyTorch.

Problems have a dtype: "f32", "f64", "bf16" or "f16" (the tensors' element type). bf16 and f16
are 16-bit tensors in and out computed with fp32 accumulation (contract: relative L2 error
<= 1e-2 against fp64 on the same rounded inputs). float32 tensor-core plans need a 16-byte
aligned input pointer when the width is a multiple of 4 (plan_run says so). An Engine's
precision ("fp32", "fp32x3", "tf32") applies to its f32 problems only.

The shared library is looked up, in order, at ``$CONVT3D_LIBRARY``, next to this file (the copy
that ``pip install .`` bundles) and at ``<repo>/build/libconvt3d.so`` (a source checkout).
It is loaded on first use, so importing the package works on machines where it is missing.
"""

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ABI_VERSION = 3  # CONVT3D_C_ABI_VERSION that the structs below mirror
LIBRARY_NAME = "libconvt3d.so"

# convt3d_status_t
OK = 0
INVALID_ARGUMENT = 1
FAILED_PRECONDITION = 2
NOT_FOUND = 3
UNAVAILABLE = 4
INTERNAL = 5
STATUS_NAMES = {
    OK: "OK",
    INVALID_ARGUMENT: "INVALID_ARGUMENT",
    FAILED_PRECONDITION: "FAILED_PRECONDITION",
    NOT_FOUND: "NOT_FOUND",
    UNAVAILABLE: "UNAVAILABLE",
    INTERNAL: "INTERNAL",
}

DTYPES = {"f32": 0, "f64": 1, "bf16": 2, "f16": 3}  # convt3d_dtype_t
# Relative L2 error bound against fp64 per dtype (f32: the precision's, see PRECISION_TOLERANCES).
DTYPE_TOLERANCES = {"f64": 1e-12, "bf16": 1e-2, "f16": 1e-2}
POLICIES = {
    "never": 0,
    "cache_or_heuristic": 1,
    "tune_if_missing": 2,
    "exhaustive": 3,
    "background": 4,
}
PRECISIONS = {"fp32": 0, "tf32": 1, "fp32x3": 2}
PRECISION_TOLERANCES = {"fp32": 1e-6, "fp32x3": 1e-5, "tf32": 1e-3}
# 16-bit names that are not precisions (16-bit compute is chosen by the tensors' dtype): the
# Problem dtype and the torch dtype to use instead, for a clear error.
DTYPE_NOT_PRECISION = {
    "bf16": ("bf16", "torch.bfloat16"),
    "f16": ("f16", "torch.float16"),
    "fp16": ("f16", "torch.float16"),
}

Triple = Tuple[int, int, int]


class Convt3dError(RuntimeError):
    """A convt3d C API call failed; ``code`` is the convt3d_status_t, ``message`` the reason."""

    def __init__(self, code: int, message: str, call: str = "") -> None:
        self.code = code
        self.status_name = STATUS_NAMES.get(code, "UNKNOWN")
        self.message = message
        where = f"{call}: " if call else ""
        super().__init__(f"convt3d: {where}{self.status_name}: {message}")


class LibraryNotFoundError(OSError):
    """libconvt3d.so was not found or could not be loaded."""


class _CProblem(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_int64),
        ("c_in", ctypes.c_int64),
        ("c_out", ctypes.c_int64),
        ("in_", ctypes.c_int64 * 3),
        ("kernel", ctypes.c_int64 * 3),
        ("stride", ctypes.c_int64 * 3),
        ("padding", ctypes.c_int64 * 3),
        ("output_padding", ctypes.c_int64 * 3),
        ("dilation", ctypes.c_int64 * 3),
        ("groups", ctypes.c_int64),
        ("has_bias", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
    ]


class _COptions(ctypes.Structure):
    _fields_ = [
        ("policy", ctypes.c_int32),
        ("precision", ctypes.c_int32),
        ("cache_path", ctypes.c_char_p),
        ("device", ctypes.c_int32),
        ("max_candidates", ctypes.c_int32),
        ("warmup", ctypes.c_int32),
        ("repeats", ctypes.c_int32),
        ("compile_threads", ctypes.c_int32),
        ("verbose", ctypes.c_int32),
        ("vendor_candidates", ctypes.c_int32),
        ("fp32x3_fp16", ctypes.c_int32),
    ]


def precision_code(precision: str) -> int:
    """Returns the C enum value of a precision name; raises ValueError for any other name.

    "bf16", "f16" and "fp16" get their own message: 16-bit compute is selected by the tensors'
    dtype (a Problem with dtype "bf16"/"f16", i.e. torch.bfloat16/float16 tensors), not by a
    precision; precisions apply to f32 problems only.
    """
    if precision in PRECISIONS:
        return PRECISIONS[precision]
    if precision in DTYPE_NOT_PRECISION:
        dtype, torch_dtype = DTYPE_NOT_PRECISION[precision]
        raise ValueError(
            f"convt3d: precision={precision!r} is not a precision: 16-bit compute is selected by "
            f"the tensors' dtype; pass {torch_dtype} tensors (a Problem with dtype={dtype!r}) "
            f"instead. precision must be one of {sorted(PRECISIONS)} and applies to float32 only"
        )
    raise ValueError(
        f"convt3d: precision must be one of {sorted(PRECISIONS)}, got {precision!r}"
    )


def _as_triple(name: str, value) -> Triple:
    if isinstance(value, int):
        return (value, value, value)
    t = tuple(int(v) for v in value)
    if len(t) == 1:
        return (t[0], t[0], t[0])
    if len(t) != 3:
        raise ValueError(f"{name} must be an int or 3 ints, got {value!r}")
    return t  # type: ignore[return-value]


@dataclass(frozen=True)
class Problem:
    """nn.ConvTranspose3d applied to an input of shape [n, c_in, *in_size] (D, H, W order).

    Hashable, so it keys plan caches. ``dtype`` is "f32", "f64", "bf16" or "f16" (16-bit
    tensors in and out, fp32 accumulation).
    """

    n: int
    c_in: int
    c_out: int
    in_size: Triple
    kernel: Triple
    stride: Triple = (1, 1, 1)
    padding: Triple = (0, 0, 0)
    output_padding: Triple = (0, 0, 0)
    dilation: Triple = (1, 1, 1)
    groups: int = 1
    bias: bool = False
    dtype: str = "f32"

    def __post_init__(self) -> None:
        for name in ("in_size", "kernel", "stride", "padding", "output_padding", "dilation"):
            object.__setattr__(self, name, _as_triple(name, getattr(self, name)))

    def out_size(self) -> Triple:
        """PyTorch's output size per spatial dimension (no validation)."""
        return tuple(  # type: ignore[return-value]
            (self.in_size[i] - 1) * self.stride[i]
            - 2 * self.padding[i]
            + self.dilation[i] * (self.kernel[i] - 1)
            + self.output_padding[i]
            + 1
            for i in range(3)
        )

    def to_c(self) -> _CProblem:
        dtype = "f16" if self.dtype == "fp16" else self.dtype  # "fp16" as the CLI accepts it
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)} (or fp16), got {self.dtype!r}")
        c = _CProblem()
        c.n, c.c_in, c.c_out, c.groups = self.n, self.c_in, self.c_out, self.groups
        for i in range(3):
            c.in_[i] = self.in_size[i]
            c.kernel[i] = self.kernel[i]
            c.stride[i] = self.stride[i]
            c.padding[i] = self.padding[i]
            c.output_padding[i] = self.output_padding[i]
            c.dilation[i] = self.dilation[i]
        c.has_bias = 1 if self.bias else 0
        c.dtype = DTYPES[dtype]
        return c

    @staticmethod
    def from_c(c: _CProblem) -> "Problem":
        names = {v: k for k, v in DTYPES.items()}
        return Problem(
            n=c.n,
            c_in=c.c_in,
            c_out=c.c_out,
            in_size=tuple(c.in_),
            kernel=tuple(c.kernel),
            stride=tuple(c.stride),
            padding=tuple(c.padding),
            output_padding=tuple(c.output_padding),
            dilation=tuple(c.dilation),
            groups=c.groups,
            bias=bool(c.has_bias),
            dtype=names.get(c.dtype, str(c.dtype)),
        )


# ---- Loading ---------------------------------------------------------------------------------
_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def library_candidates() -> List[Path]:
    """Where the library is looked for, in order (``$CONVT3D_LIBRARY`` alone when it is set)."""
    env = os.environ.get("CONVT3D_LIBRARY")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    return [here / LIBRARY_NAME, here.parent.parent / "build" / LIBRARY_NAME]


def _declare(lib: ctypes.CDLL) -> None:
    P, c = ctypes.POINTER, ctypes
    sigs = {
        "convt3d_version": (c.c_char_p, []),
        "convt3d_abi_version": (c.c_int, []),
        "convt3d_status_name": (c.c_char_p, [c.c_int]),
        "convt3d_last_error": (c.c_char_p, []),
        "convt3d_problem_init": (None, [P(_CProblem)]),
        "convt3d_validate": (c.c_int, [P(_CProblem)]),
        "convt3d_output_size": (c.c_int, [P(_CProblem), P(c.c_int64)]),
        "convt3d_problem_signature": (
            c.c_int,
            [P(_CProblem), c.c_char_p, c.c_size_t, P(c.c_size_t)],
        ),
        "convt3d_options_init": (None, [P(_COptions)]),
        "convt3d_engine_create": (c.c_int, [P(_COptions), P(c.c_void_p)]),
        "convt3d_engine_destroy": (None, [c.c_void_p]),
        "convt3d_engine_cache_path": (c.c_char_p, [c.c_void_p]),
        "convt3d_engine_cache_warning": (c.c_char_p, [c.c_void_p]),
        "convt3d_engine_nvrtc_compiles": (c.c_int, [c.c_void_p]),
        "convt3d_plan_create": (c.c_int, [c.c_void_p, P(_CProblem), P(c.c_void_p)]),
        "convt3d_plan_destroy": (None, [c.c_void_p]),
        "convt3d_plan_run": (
            c.c_int,
            [c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p],
        ),
        "convt3d_plan_run_versioned": (
            c.c_int,
            [c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p, c.c_void_p,
             c.c_uint64],
        ),
        "convt3d_plan_problem": (None, [c.c_void_p, P(_CProblem)]),
        "convt3d_plan_kernel_name": (c.c_char_p, [c.c_void_p]),
        "convt3d_plan_source": (c.c_char_p, [c.c_void_p]),
        "convt3d_plan_tuned_ms": (c.c_double, [c.c_void_p]),
        "convt3d_plan_rel_err": (c.c_double, [c.c_void_p]),
        "convt3d_plan_origin": (c.c_int, [c.c_void_p, P(c.c_char_p), P(c.c_char_p)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def load() -> ctypes.CDLL:
    """Loads libconvt3d.so once (thread-safe) and checks its ABI version."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in library_candidates():
            if not path.is_file():
                tried.append(f"{path} (missing)")
                continue
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                tried.append(f"{path} (not a convt3d C API library: {e})")
                continue
            abi = lib.convt3d_abi_version()
            if abi != ABI_VERSION:
                tried.append(f"{path} (C ABI version {abi}, this package needs {ABI_VERSION})")
                continue
            _lib, _lib_path = lib, str(path)
            return lib
        raise LibraryNotFoundError(
            "convt3d: cannot load libconvt3d.so; tried: "
            + "; ".join(tried)
            + ". Build it with `cmake -S <repo> -B <repo>/build && cmake --build <repo>/build "
            "--target convt3d_shared`, reinstall with `pip install <repo>`, or set "
            "CONVT3D_LIBRARY to its path."
        )


def library_path() -> str:
    """The path of the loaded library (loading it if needed)."""
    load()
    assert _lib_path is not None
    return _lib_path


def _check(status: int, call: str) -> None:
    if status != OK:
        msg = (_lib.convt3d_last_error() or b"").decode("utf-8", "replace")  # type: ignore
        raise Convt3dError(status, msg, call)


def version() -> str:
    """The library's version string, e.g. "0.1.0"."""
    return load().convt3d_version().decode()


def validate(problem: Problem) -> None:
    """Raises Convt3dError (INVALID_ARGUMENT) naming the field when PyTorch would refuse it."""
    lib = load()
    c = problem.to_c()
    _check(lib.convt3d_validate(ctypes.byref(c)), "validate")


def output_size(problem: Problem) -> Triple:
    """Validates, then returns the output's spatial size (D, H, W)."""
    lib = load()
    c = problem.to_c()
    out = (ctypes.c_int64 * 3)()
    _check(lib.convt3d_output_size(ctypes.byref(c), out), "output_size")
    return (out[0], out[1], out[2])


def signature(problem: Problem) -> str:
    """The problem's cache-key signature, e.g. "f32_n2_ci4_co6_i3x4x5_k3x3x3_..."."""
    lib = load()
    c = problem.to_c()
    needed = ctypes.c_size_t(0)
    _check(lib.convt3d_problem_signature(ctypes.byref(c), None, 0, ctypes.byref(needed)), "sig")
    buf = ctypes.create_string_buffer(needed.value)
    _check(lib.convt3d_problem_signature(ctypes.byref(c), buf, needed.value, None), "signature")
    return buf.value.decode()


class _Handle:
    """Owns a handle of the C API, freed by ``close()`` or when garbage-collected."""

    _destroy = ""  # the C function that frees the handle
    _handle = ctypes.c_void_p(0)  # none yet (e.g. a constructor that raised)

    def close(self) -> None:
        """Frees the handle now (also done when the object is garbage-collected)."""
        if self._handle and _lib is not None:
            getattr(_lib, self._destroy)(self._handle)
        self._handle = ctypes.c_void_p(0)

    def __del__(self) -> None:
        # At interpreter exit the CUDA driver may already be torn down: leave it to the OS.
        if not sys.is_finalizing():
            self.close()


class Plan(_Handle):
    """A resolved kernel for one Problem; ``run`` only launches."""

    _destroy = "convt3d_plan_destroy"

    def __init__(self, handle: int) -> None:
        self._handle = ctypes.c_void_p(handle)
        lib = load()
        c = _CProblem()
        lib.convt3d_plan_problem(self._handle, ctypes.byref(c))
        self.problem: Problem = Problem.from_c(c)

    # Read at each access: a "background" plan switches to its tuned winner at a later run.
    @property
    def kernel_name(self) -> str:
        return load().convt3d_plan_kernel_name(self._handle).decode()

    @property
    def source(self) -> str:
        return load().convt3d_plan_source(self._handle).decode()

    @property
    def tuned_ms(self) -> float:
        return load().convt3d_plan_tuned_ms(self._handle)

    @property
    def rel_err(self) -> float:
        return load().convt3d_plan_rel_err(self._handle)

    @property
    def origin(self) -> Dict[str, object]:
        """Which lookup tier served the plan: {"tier": 0-5, "name": ..., "reason": ...}.

        0 tuned, 1 exact cache entry, 2 same GPU model under another driver/NVRTC/code version,
        3 same architecture, 4 nearest tuned shape, 5 heuristic; the reason says why the better
        tiers missed.
        """
        name, reason = ctypes.c_char_p(), ctypes.c_char_p()
        tier = load().convt3d_plan_origin(self._handle, ctypes.byref(name), ctypes.byref(reason))
        return {
            "tier": tier,
            "name": (name.value or b"").decode(),
            "reason": (reason.value or b"").decode(),
        }

    def run(self, x: int, w: int, bias: int, y: int, stream: int = 0,
            weight_version: Optional[int] = None) -> None:
        """Launches on ``stream`` (a CUstream as an int; 0 is the legacy default stream).

        x, w, bias (0 when the problem has none) and y are contiguous device pointers of the
        problem's dtype on the engine's device. Returns without synchronising.
        weight_version (an int < 2**64): the plan re-lays the weights into its workspace only
        when (w, weight_version) differs from the last run's; the same pair must mean the same
        values (else old weights may be used). None: re-lay on every run.
        """
        lib = _lib
        assert lib is not None
        if weight_version is None:
            st = lib.convt3d_plan_run(self._handle, x or None, w or None, bias or None,
                                      y or None, stream or None)
        else:
            st = lib.convt3d_plan_run_versioned(self._handle, x or None, w or None,
                                                bias or None, y or None, stream or None,
                                                weight_version)
        if st != OK:
            _check(st, "plan_run")

    def __repr__(self) -> str:
        return (f"Plan({self.kernel_name!r}, source={self.source!r}, "
                f"tuned_ms={self.tuned_ms:.4g})")


class Engine(_Handle):
    """Owns the driver context, the NVRTC compiler and the SQLite cache for one device.

    policy: "never", "cache_or_heuristic", "tune_if_missing" (default), "exhaustive" or
    "background" (lookup tiers or the heuristic at once, tuned on a worker thread; plans switch
    to the winner at a later run).
    precision: "fp32" (strict, <= 1e-6 rel. error), "fp32x3" (3xTF32 tensor cores, <= 1e-5) or
    "tf32" (<= 1e-3), for f32 problems only (f64 is always strict; bf16/f16 problems always
    accumulate in fp32, <= 1e-2, whatever the engine's precision). cache_path: None for the
    library's default ($CONVT3D_CACHE, else ~/.cache/convt3d/cache.sqlite), shared with the C++
    API and the CLI. vendor_candidates: cuDNN's algorithms compete where cuDNN loads.
    fp32x3_fp16: fp32x3 may also run the scaled 3xFP16 tiles (faster; cached apart; see the
    README for the operand range it needs). ``close()`` frees the engine; plans made by it stay
    usable.
    """

    _destroy = "convt3d_engine_destroy"

    def __init__(
        self,
        policy: str = "tune_if_missing",
        precision: str = "fp32",
        cache_path: Optional[str] = None,
        device: int = 0,
        max_candidates: int = 0,
        warmup: int = 3,
        repeats: int = 20,
        compile_threads: int = 0,
        verbose: bool = False,
        vendor_candidates: bool = True,
        fp32x3_fp16: bool = False,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"convt3d: policy must be one of {list(POLICIES)}, got {policy!r}")
        lib = load()
        o = _COptions()
        lib.convt3d_options_init(ctypes.byref(o))
        o.policy = POLICIES[policy]
        o.precision = precision_code(precision)
        o.cache_path = os.fsencode(cache_path) if cache_path else None
        o.device = device
        o.max_candidates = max_candidates
        o.warmup = warmup
        o.repeats = repeats
        o.compile_threads = compile_threads
        o.verbose = 1 if verbose else 0
        o.vendor_candidates = 1 if vendor_candidates else 0
        o.fp32x3_fp16 = 1 if fp32x3_fp16 else 0
        handle = ctypes.c_void_p(0)
        _check(lib.convt3d_engine_create(ctypes.byref(o), ctypes.byref(handle)), "engine_create")
        self._handle = handle
        self.policy, self.precision, self.device = policy, precision, device

    @property
    def cache_path(self) -> str:
        return load().convt3d_engine_cache_path(self._handle).decode()

    @property
    def cache_warning(self) -> str:
        return load().convt3d_engine_cache_warning(self._handle).decode()

    @property
    def nvrtc_compiles(self) -> int:
        return load().convt3d_engine_nvrtc_compiles(self._handle)

    def plan(self, problem: Problem) -> Plan:
        """Validates, then resolves a kernel per the policy (may tune: seconds to minutes).

        Must not be called while a CUDA graph is being captured.
        """
        lib = load()
        c = problem.to_c()
        handle = ctypes.c_void_p(0)
        _check(lib.convt3d_plan_create(self._handle, ctypes.byref(c), ctypes.byref(handle)),
               "plan_create")
        return Plan(handle.value)


def problem_from_shapes(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    stride: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0, 0, 0),
    output_padding: Sequence[int] = (0, 0, 0),
    groups: int = 1,
    dilation: Sequence[int] = (1, 1, 1),
    bias: bool = False,
    dtype: str = "f32",
) -> Problem:
    """The Problem of F.conv_transpose3d(input, weight, ...) for the given tensor shapes."""
    return Problem(
        n=int(input_shape[0]),
        c_in=int(input_shape[1]),
        c_out=int(weight_shape[1]) * int(groups),
        in_size=tuple(int(v) for v in input_shape[2:5]),
        kernel=tuple(int(v) for v in weight_shape[2:5]),
        stride=tuple(stride),
        padding=tuple(padding),
        output_padding=tuple(output_padding),
        dilation=tuple(dilation),
        groups=int(groups),
        bias=bias,
        dtype=dtype,
    )
