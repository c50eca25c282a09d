"""test_torch_gpu.py: convt3d.torch on a GPU against nn.ConvTranspose3d (cuDNN), fp64 first.

Level-1 configurations (scaled down) and CONVT3D_TEST_RANDOM (default 200) random ones in
fp64; fp32; native bf16/fp16 (relative L2 <= 1e-2 against an fp64 CPU reference of the same
rounded inputs, the 16-bit contract); non-contiguous and misaligned inputs; streams;
torch.compile(fullgraph=True); CUDA graphs; gradcheck; the SQLite cache shared with the CLI;
the direct eager path (the op's result bit for bit; the op under a dispatch mode, the profiler
and autograd). Skipped with the reason when there is no PyTorch, no CUDA device or no
libconvt3d.so.

Plans use CONVT3D_TEST_POLICY (default "never": the heuristic kernel, one NVRTC compile per
shape, so the suite is quick; "tune_if_missing" tests tuned kernels) with an in-memory cache.
"""

import os
import subprocess
import tempfile

import pytest

from helpers import REPO, env_int, functional_args, level1, no_cuda_reason, random_config

_REASON = no_cuda_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convt3d.torch as ct  # noqa: E402
from convt3d import _lib  # noqa: E402

POLICY = os.environ.get("CONVT3D_TEST_POLICY", "never")
N_RANDOM = env_int("CONVT3D_TEST_RANDOM", 200)
DEV = "cuda"


def setup_module() -> None:
    ct.configure(policy=POLICY, cache_path=":memory:")


def teardown_module() -> None:
    ct.configure(policy="tune_if_missing", cache_path="")


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    """max |y - ref| / max |ref| (over finite values; +inf when y has a NaN/Inf)."""
    y, ref = y.double(), ref.double()
    if not torch.isfinite(y).all():
        return float("inf")
    scale = ref.abs().max().item() or 1.0
    return (y - ref).abs().max().item() / scale


def rel_l2(y: torch.Tensor, ref: torch.Tensor) -> float:
    """||y - ref|| / ||ref|| in fp64 on the CPU (the library's accuracy contracts' measure)."""
    y, ref = y.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(y).all():
        return float("inf")
    return ((y - ref).norm() / (ref.norm() or 1.0)).item()


def reference_fp64_cpu(x, w, b, kw) -> torch.Tensor:
    """F.conv_transpose3d in float64 on the CPU, of the given (already rounded) tensors."""
    return F.conv_transpose3d(
        x.detach().double().cpu(),
        w.detach().double().cpu(),
        None if b is None else b.detach().double().cpu(),
        **functional_args(kw),
    )


HALF_DTYPES = [torch.bfloat16, torch.float16]
TOL_16 = _lib.DTYPE_TOLERANCES["bf16"]  # 1e-2, the same for f16


def make_pair(kw, dtype=torch.float64, seed=0):
    """A reference nn.ConvTranspose3d and a convt3d one with the same weights, on the GPU."""
    torch.manual_seed(seed)
    ref = nn.ConvTranspose3d(**kw).to(DEV, dtype)
    ours = ct.ConvTranspose3d(**kw).to(DEV, dtype)
    ours.load_state_dict(ref.state_dict())
    if kw.get("bias"):
        with torch.no_grad():  # the default init of bias is small; make it count
            ref.bias.uniform_(-1, 1)
            ours.bias.copy_(ref.bias)
    return ref, ours


@pytest.mark.parametrize("index", range(7))
def test_level1_fp64(index: int) -> None:
    p = level1(scale=True)[index]
    for bias in (False, True):
        kw = dict(p["module"], bias=bias)
        ref, ours = make_pair(kw, seed=index)
        x = torch.randn(*p["input"], device=DEV, dtype=torch.float64)
        with torch.no_grad():
            y, expected = ours(x), ref(x)
        assert y.shape == expected.shape
        err = rel_err(y, expected)
        assert err <= 1e-10, f"{p['name']} bias={bias}: rel err {err:.3g}"


def random_case(config_seed: int, seed: int):
    """random_config(config_seed), its fp64 module pair (make_pair with ``seed``) and an fp64
    input for it on the GPU."""
    cfg = random_config(config_seed)
    ref, ours = make_pair(cfg["module"], seed=seed)
    x = torch.randn(*cfg["input"], device=DEV, dtype=torch.float64)
    return cfg, ref, ours, x


@pytest.mark.parametrize("seed", range(N_RANDOM))
def test_random_fp64(seed: int) -> None:
    cfg, ref, ours, x = random_case(10_000 + seed, seed)
    with torch.no_grad():
        y, expected = ours(x), ref(x)
    err = rel_err(y, expected)
    assert err <= 1e-10, f"config {cfg}: rel err {err:.3g}"


@pytest.mark.parametrize("seed", range(20))
def test_random_fp32_against_fp64(seed: int) -> None:
    cfg, ref, ours, x = random_case(20_000 + seed, seed)
    with torch.no_grad():
        expected = ref(x)
        y = ours.float()(x.float())
    assert y.dtype == torch.float32
    err = rel_err(y, expected)
    assert err <= 1e-5, f"config {cfg}: rel err {err:.3g}"


@pytest.mark.parametrize("precision, tol", [("fp32x3", 1e-5), ("tf32", 1e-3)])
@pytest.mark.parametrize("index", range(7))
def test_level1_tensor_core_precisions(index: int, precision: str, tol: float) -> None:
    """float32 modules in the tensor-core precisions, relative L2 error against fp64 (the
    contract's measure), on the scaled-down level-1 configurations."""
    p = level1(scale=True)[index]
    kw = dict(p["module"], bias=index % 2 == 1)
    ref, ours = make_pair(kw, seed=100 + index)
    ours = ours.float()
    ours.precision = precision
    x = torch.randn(*p["input"], device=DEV, dtype=torch.float64)
    with torch.no_grad():
        expected = ref(x)
        y = ours(x.float())
    assert y.dtype == torch.float32
    l2 = ((y.double() - expected).norm() / expected.norm()).item()
    assert l2 <= tol, f"{p['name']} {precision}: rel L2 {l2:.3g}"


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("index", range(7))
@pytest.mark.parametrize("width", ["even", "odd"])
def test_level1_16bit(index: int, dtype: torch.dtype, width: str) -> None:
    """bfloat16/float16 modules run natively (16-bit in and out, fp32 accumulation): relative L2
    error against an fp64 CPU reference of the same rounded inputs and weights, on the
    scaled-down level-1 configurations. The scaled widths are all even (the tensor-core
    kernel's case); "odd" adds one to the width (a direct kernel)."""
    p = level1(scale=True)[index]
    kw = dict(p["module"], bias=index % 2 == 1)
    _, ours = make_pair(kw, seed=200 + index)
    ours = ours.to(dtype)
    shape = list(p["input"])
    if width == "odd":
        shape[4] += 1 if shape[4] % 2 == 0 else 0
    assert (shape[4] % 2 == 1) == (width == "odd")
    x = torch.randn(*shape, device=DEV).to(dtype)
    with torch.no_grad():
        y = ours(x)
    expected = reference_fp64_cpu(x, ours.weight, ours.bias, kw)
    assert y.dtype == dtype and y.shape == expected.shape
    l2 = rel_l2(y, expected)
    assert l2 <= TOL_16, f"{p['name']} {dtype} width {shape[4]}: rel L2 {l2:.3g}"


_SHAPES_16 = {
    # name: (nn.ConvTranspose3d kwargs, input shape)
    "s1_even_w": (dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, bias=False),
                  (2, 8, 4, 5, 6)),
    "s1_odd_w_bias": (dict(in_channels=8, out_channels=8, kernel_size=3, padding=1, bias=True),
                      (2, 8, 4, 5, 7)),
    "s2_groups_bias_even_w": (dict(in_channels=8, out_channels=6, kernel_size=3, stride=2,
                                   padding=1, output_padding=1, groups=2, bias=True),
                              (2, 8, 5, 6, 8)),
    "s2_groups_bias_odd_w": (dict(in_channels=8, out_channels=6, kernel_size=3, stride=2,
                                  padding=1, output_padding=1, groups=2, bias=True),
                             (2, 8, 5, 6, 7)),
    "s2_wide_channels_even_w": (dict(in_channels=40, out_channels=24, kernel_size=(3, 3, 4),
                                     stride=2, padding=1, bias=True),
                                (2, 40, 3, 6, 10)),
    "asym_dilation_groups_odd_w": (dict(in_channels=6, out_channels=9, kernel_size=(2, 3, 4),
                                        stride=(1, 2, 3), padding=(0, 1, 1), dilation=(2, 1, 1),
                                        groups=3, bias=True),
                                   (1, 6, 3, 4, 5)),
    "pointwise_w1": (dict(in_channels=4, out_channels=3, kernel_size=1, bias=True),
                     (3, 4, 2, 3, 1)),
}


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(_SHAPES_16))
def test_16bit_native_forward(name: str, dtype: torch.dtype) -> None:
    """Small bf16/f16 shapes (stride 2, groups, bias, dilation, odd and even widths): the output
    keeps the dtype and meets the 16-bit contract against fp64 of the same rounded inputs."""
    kw, shape = _SHAPES_16[name]
    _, ours = make_pair(kw, seed=7)
    ours = ours.to(dtype)
    x = torch.randn(*shape, device=DEV).to(dtype)
    with torch.no_grad():
        y = ours(x)
        yf = ct.conv_transpose3d(x, ours.weight, ours.bias, **functional_args(kw))
    expected = reference_fp64_cpu(x, ours.weight, ours.bias, kw)
    assert y.dtype == dtype and yf.dtype == dtype and y.device == x.device
    assert y.shape == expected.shape
    assert torch.equal(y, yf)
    l2 = rel_l2(y, expected)
    assert l2 <= TOL_16, f"{name} {dtype}: rel L2 {l2:.3g}"
    dtype_name = "bf16" if dtype == torch.bfloat16 else "f16"
    assert any(q["problem"].dtype == dtype_name and q["problem"].in_size == tuple(shape[2:])
               for q in ct.plans()), "no native 16-bit plan was made"


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
def test_16bit_misaligned_and_noncontiguous_inputs(dtype: torch.dtype) -> None:
    """A 16-bit view 2 bytes off a 4-byte boundary (the tensor-core kernel copies pairs) and a
    non-contiguous view are copied to an aligned contiguous tensor first."""
    kw = dict(in_channels=8, out_channels=8, kernel_size=3, stride=2, padding=1, bias=True)
    _, ours = make_pair(kw, seed=8)
    ours = ours.to(dtype)
    shape = (2, 8, 4, 6, 8)  # even width: the tensor-core kernel's case
    numel = 2 * 8 * 4 * 6 * 8
    flat = torch.randn(numel + 1, device=DEV).to(dtype)
    x = flat[1:].view(shape)
    assert x.is_contiguous() and x.data_ptr() % 4 == 2
    fresh = x.clone(memory_format=torch.contiguous_format)
    assert fresh.data_ptr() % 16 == 0  # what the wrapper relies on for its copy
    big = torch.randn(2, 8, 4, 6, 16, device=DEV).to(dtype)
    cases = {"misaligned": x, "strided (every other W)": big[..., ::2],
             "channels_last_3d": fresh.to(memory_format=torch.channels_last_3d)}
    for case, xc in cases.items():
        with torch.no_grad():
            y = ours(xc)
        expected = reference_fp64_cpu(xc, ours.weight, ours.bias, kw)
        assert y.dtype == dtype
        l2 = rel_l2(y, expected)
        assert l2 <= TOL_16, f"{case} {dtype}: rel L2 {l2:.3g}"


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
def test_16bit_ignores_the_f32_precision(dtype: torch.dtype) -> None:
    """precision is a float32 contract: 16-bit tensors give the same result under any of them."""
    kw = dict(in_channels=8, out_channels=8, kernel_size=3, padding=1)
    x = torch.randn(2, 8, 4, 5, 6, device=DEV, dtype=dtype)
    w = torch.randn(8, 8, 3, 3, 3, device=DEV, dtype=dtype)
    with torch.no_grad():
        ys = [ct.conv_transpose3d(x, w, padding=1, precision=prec)
              for prec in ("fp32", "tf32", "fp32x3")]
    assert all(torch.equal(ys[0], y) for y in ys[1:])
    assert rel_l2(ys[0], reference_fp64_cpu(x, w, None, kw)) <= TOL_16
    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    with pytest.raises(ValueError, match=f"pass {dtype} tensors"):
        ct.conv_transpose3d(x, w, padding=1, precision=name)


def test_float32_against_fp64_with_groups_and_bias() -> None:
    kw = dict(in_channels=8, out_channels=6, kernel_size=3, stride=2, padding=1,
              output_padding=1, groups=2, bias=True)
    _, ours = make_pair(kw, dtype=torch.float64)
    ours = ours.float()
    x = torch.randn(2, 8, 5, 6, 7, device=DEV)
    with torch.no_grad():
        y = ours(x)
        # fp64 reference of the same (rounded) inputs and weights
        expected = F.conv_transpose3d(x.double(), ours.weight.double(), ours.bias.double(),
                                      **functional_args(kw))
    assert y.dtype == torch.float32 and y.device == x.device
    assert rel_err(y, expected) <= 1e-5


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
def test_autocast_mixed_dtypes(dtype: torch.dtype) -> None:
    """Inside torch.autocast a 16-bit activation meets fp32 weights, as in nn.ConvTranspose3d."""
    kw = dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, bias=True)
    ref, ours = make_pair(kw, dtype=torch.float32)
    x = torch.randn(2, 4, 5, 5, 5, device=DEV, dtype=dtype)
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        y, expected = ours(x), ref(x)
    assert y.dtype == expected.dtype == dtype
    assert rel_err(y, expected) <= 2e-2


def test_noncontiguous_and_offset_inputs() -> None:
    kw = dict(in_channels=4, out_channels=4, kernel_size=(2, 3, 2), stride=(1, 2, 2),
              bias=True)
    ref, ours = make_pair(kw)
    big = torch.randn(2, 4, 7, 6, 5, device=DEV, dtype=torch.float64)
    cases = {
        "channels_last_3d": big.to(memory_format=torch.channels_last_3d),
        "sliced (storage offset)": big[:, :, 1:],
        "transposed view": big.transpose(3, 4),
        "unbatched": big[0],
    }
    for name, x in cases.items():
        with torch.no_grad():
            err = rel_err(ours(x), ref(x))
        assert err <= 1e-10, f"{name}: {err}"
    w = ours.weight.detach().transpose(2, 4).contiguous().transpose(2, 4)
    assert not w.is_contiguous()
    with torch.no_grad():
        y = ct.conv_transpose3d(big, w, ours.bias, stride=(1, 2, 2))
    assert rel_err(y, ref(big).detach()) <= 1e-10


def test_empty_batch() -> None:
    m = ct.ConvTranspose3d(3, 5, 3, stride=2).to(DEV)
    y = m(torch.randn(0, 3, 4, 4, 4, device=DEV))
    assert y.shape == (0, 5, 9, 9, 9)


def test_runs_on_the_current_stream() -> None:
    kw = dict(in_channels=6, out_channels=3, kernel_size=3, stride=2)
    ref, ours = make_pair(kw)
    x = torch.randn(2, 6, 9, 9, 9, device=DEV, dtype=torch.float64)
    with torch.no_grad():
        ours(x)  # plan outside the side stream
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = ours(x)
            expected = ref(x)
        s.synchronize()
    assert rel_err(y, expected) <= 1e-10


def test_device_and_dtype_errors() -> None:
    x = torch.randn(1, 2, 3, 3, 3, device=DEV)
    w = torch.randn(2, 2, 2, 2, 2)
    with pytest.raises(RuntimeError, match="weight is on cpu"):
        ct.conv_transpose3d(x, w)
    with pytest.raises(RuntimeError, match="bias"):
        ct.conv_transpose3d(x, w.to(DEV), torch.zeros(2, device=DEV, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="not supported on CUDA"):
        ct.conv_transpose3d(x.int(), w.to(DEV).int())


def test_convert_model_on_gpu() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.ConvTranspose3d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.ConvTranspose3d(8, 4, 4, stride=2, padding=1, bias=False),
    ).to(DEV, torch.float64)
    x = torch.randn(2, 8, 5, 5, 5, device=DEV, dtype=torch.float64)
    with torch.no_grad():
        expected = model(x)
        ct.convert_model(model)
        y = model(x)
    assert isinstance(model[0], ct.ConvTranspose3d)
    assert rel_err(y, expected) <= 1e-10
    assert any(p["device"] == torch.cuda.current_device() for p in ct.plans())


def test_torch_compile_fullgraph() -> None:
    torch._dynamo.reset()
    torch.manual_seed(4)
    model = nn.Sequential(
        ct.ConvTranspose3d(8, 4, 3, stride=2, padding=1, output_padding=1),
        nn.GELU(),
        ct.ConvTranspose3d(4, 4, (1, 3, 3), padding=(0, 1, 1)),
    ).to(DEV)
    x = torch.randn(2, 8, 5, 6, 7, device=DEV, requires_grad=True)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)  # a graph break raises
    y = compiled(x)
    torch.testing.assert_close(y, eager, rtol=1e-5, atol=1e-5)
    (gx,) = torch.autograd.grad(y.sum(), (x,))
    (ex,) = torch.autograd.grad(eager.sum(), (x,))
    torch.testing.assert_close(gx, ex, rtol=1e-4, atol=1e-4)
    # Dynamic batch: the fake implementation computes the shape symbolically.
    dyn = torch.compile(model, fullgraph=True, dynamic=True)
    for n in (1, 3):
        xn = torch.randn(n, 8, 5, 6, 7, device=DEV)
        with torch.no_grad():
            torch.testing.assert_close(dyn(xn), model(xn), rtol=1e-5, atol=1e-5)


def test_torch_compile_reduce_overhead() -> None:
    """Inductor's CUDA graphs (mode="reduce-overhead") around the op."""
    torch._dynamo.reset()
    model = ct.ConvTranspose3d(4, 4, 3, stride=2).to(DEV).eval()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        x = torch.randn(2, 4, 6, 6, 6, device=DEV)
        with torch.no_grad():
            y = compiled(x).clone()
            torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)


def test_cuda_graph_capture_and_replay() -> None:
    kw = dict(in_channels=8, out_channels=4, kernel_size=3, stride=2, padding=1, bias=True)
    ref, ours = make_pair(kw, dtype=torch.float32)
    static_x = torch.randn(2, 8, 6, 6, 6, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):  # warm-up outside capture creates the plan
        for _ in range(2):
            ours(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = ours(static_x)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn_like(static_x)
        static_x.copy_(x)
        g.replay()
        torch.cuda.synchronize()
        with torch.no_grad():
            expected = F.conv_transpose3d(x.double(), ours.weight.double(), ours.bias.double(),
                                          **functional_args(kw))
        assert rel_err(static_y, expected) <= 1e-5


def test_cuda_graph_new_shape_raises_clearly() -> None:
    m = ct.ConvTranspose3d(3, 3, 2).to(DEV)
    x = torch.randn(1, 3, 11, 5, 7, device=DEV)  # a shape no test planned before
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capture"):
        with torch.no_grad(), torch.cuda.graph(g):
            m(x)
    with torch.no_grad():
        m(x)  # outside capture it plans and runs


def test_gradcheck_cuda_float64() -> None:
    torch.manual_seed(5)
    kw = dict(stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0), groups=2,
              dilation=(1, 2, 1))
    x = torch.randn(2, 4, 3, 2, 3, device=DEV, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, 2, 3, 2, device=DEV, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, device=DEV, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: ct.conv_transpose3d(x, w, b, **kw),
                                    (x, w, b))


@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=["bf16", "f16"])
def test_backward_matches_pytorch_16bit_module(dtype: torch.dtype) -> None:
    kw = dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, bias=True)
    ref, ours = make_pair(kw, dtype=dtype)
    x = torch.randn(2, 4, 4, 4, 4, device=DEV, dtype=dtype)
    ours(x).float().square().sum().backward()
    ref(x).float().square().sum().backward()
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert a.grad is not None and a.grad.dtype == dtype
        assert rel_err(a.grad, b.grad) <= 5e-2


def test_cache_is_shared_with_the_cli() -> None:
    """A shape tuned by `convt3d tune` is a cache hit from Python's first call, and back."""
    cli = REPO / "build" / "convt3d"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cache.sqlite")
        x = torch.randn(2, 8, 5, 6, 7, device=DEV)
        w = torch.randn(8, 4, 3, 3, 3, device=DEV)
        w2 = torch.randn(8, 2, 3, 3, 3, device=DEV)  # a second shape, tuned from Python
        try:
            if cli.exists():
                cmd = [str(cli), "tune", "--input", "2,8,5,6,7", "--out-channels", "4",
                       "--kernel-size", "3", "--stride", "2", "--padding", "1",
                       "--max-candidates", "2", "--cache", path]
                # The CLI must load the cuDNN this process loaded (PyTorch's wheel): cache keys
                # carry the cuDNN version that competed, so a CLI without it tunes other keys.
                env = dict(os.environ)
                try:
                    import nvidia.cudnn  # the wheel PyTorch loads its libcudnn from

                    env.setdefault("CONVT3D_CUDNN",
                                   os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))
                except ImportError:
                    pass
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
                assert out.returncode == 0, out.stdout + out.stderr
                ct.configure(policy="cache_or_heuristic", cache_path=path)
                ct.conv_transpose3d(x, w, stride=2, padding=1)
                assert [p["source"] for p in ct.plans()] == ["cache"]
            ct.configure(policy="tune_if_missing", cache_path=path, max_candidates=2)
            ct.conv_transpose3d(x, w2, stride=3)
            (made,) = ct.plans()
            assert made["source"] == "tuned"
            sig = _lib.signature(made["problem"])
            ct.configure(policy="cache_or_heuristic", cache_path=path)
            ct.conv_transpose3d(x, w2, stride=3)
            assert [p["source"] for p in ct.plans()] == ["cache"]
            if cli.exists():
                # --wide: the default table shortens long signatures with '...'.
                out = subprocess.run([str(cli), "cache", "list", "--wide", "--cache", path],
                                     capture_output=True, text=True, timeout=60)
                assert sig in out.stdout, out.stdout + out.stderr
        finally:
            ct.configure(policy=POLICY, cache_path=":memory:", max_candidates=0)


def test_multi_gpu() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    kw = dict(in_channels=4, out_channels=4, kernel_size=3, stride=2)
    for dev in ("cuda:0", "cuda:1"):
        torch.manual_seed(6)
        ref = nn.ConvTranspose3d(**kw).to(dev, torch.float64)
        ours = ct.ConvTranspose3d(**kw).to(dev, torch.float64)
        ours.load_state_dict(ref.state_dict())
        x = torch.randn(2, 4, 5, 5, 5, device=dev, dtype=torch.float64)
        with torch.no_grad():
            assert rel_err(ours(x), ref(x)) <= 1e-10


# ---- The direct eager path: same result as the op, and the op wherever something looks ---------
_DIRECT_CASES = {
    # name: (nn.ConvTranspose3d kwargs, input shape)
    "s2_groups_bias": (dict(in_channels=8, out_channels=6, kernel_size=3, stride=2, padding=1,
                            output_padding=1, groups=2, bias=True), (2, 8, 5, 6, 7)),
    "k2s2_no_bias": (dict(in_channels=32, out_channels=16, kernel_size=2, stride=2, bias=False),
                     (2, 32, 4, 4, 4)),
}


def _op_args(kw):
    """stride, padding, output_padding, groups, dilation as the op's schema takes them."""
    fa = functional_args(kw)
    s, p, op, d = (list(ct._triple(n, fa[n])) for n in ("stride", "padding", "output_padding",
                                                          "dilation"))
    return s, p, op, fa["groups"], d


class _CountCalls:
    """Counts conv_transpose3d's calls through the op (ct._call) while it is entered."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> "_CountCalls":
        self.real = ct._call

        def call(*args):
            self.calls += 1
            return self.real(*args)

        ct._call = call
        return self

    def __exit__(self, *exc) -> None:
        ct._call = self.real


@pytest.mark.parametrize("dtype, precision", [(torch.float32, "fp32"), (torch.float32, "tf32"),
                                              (torch.bfloat16, "fp32")],
                         ids=["f32-fp32", "f32-tf32", "bf16"])
@pytest.mark.parametrize("name", sorted(_DIRECT_CASES))
def test_direct_path_equals_the_op(name: str, dtype: torch.dtype, precision: str) -> None:
    """Under no_grad and inference_mode the call skips the op (ct._call never runs) and its
    result equals the op's bit for bit (same plan, same kernel), batched and unbatched."""
    kw, shape = _DIRECT_CASES[name]
    _, ours = make_pair(kw, seed=9)
    ours = ours.to(dtype)
    ours.precision = precision
    w, b = ours.weight, ours.bias  # Parameters that require grad
    x = torch.randn(*shape, device=DEV).to(dtype)
    fa = functional_args(kw)
    with _CountCalls() as counted:
        with torch.no_grad():
            assert ct._direct_allowed(x, w, b)
            y = ct.conv_transpose3d(x, w, b, **fa, precision=precision)
            y1 = ct.conv_transpose3d(x[0], w, b, **fa, precision=precision)
            ym = ours(x)
        with torch.inference_mode():
            yi = ct.conv_transpose3d(x, w, b, **fa, precision=precision)
    assert counted.calls == 0, "the direct path did not run"
    s, p, op, groups, d = _op_args(kw)
    with torch.no_grad():
        expected = torch.ops.convt3d.conv_transpose3d(x, w, b, s, p, op, groups, d, precision)
        expected1 = torch.ops.convt3d.conv_transpose3d(x[:1], w, b, s, p, op, groups, d,
                                                       precision)
    assert y.dtype == dtype and y.shape == expected.shape
    assert torch.equal(y, expected)
    assert torch.equal(yi, expected)
    assert torch.equal(ym, expected)
    assert y1.shape == expected1.shape[1:] and torch.equal(y1, expected1[0])
    tol = TOL_16 if dtype == torch.bfloat16 else 1e-3  # the 16-bit and tf32 contracts
    assert rel_l2(y, reference_fp64_cpu(x, w, b, kw)) <= tol


def test_dispatch_mode_and_profiler_see_the_op() -> None:
    """A TorchDispatchMode and the profiler still see convt3d::conv_transpose3d, under no_grad
    on CUDA tensors (where the direct path would run), with the direct path's result."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.name())
            return func(*args, **(kwargs or {}))

    kw, shape = _DIRECT_CASES["s2_groups_bias"]
    _, ours = make_pair(kw, dtype=torch.float32, seed=10)
    x = torch.randn(*shape, device=DEV)
    with torch.no_grad(), _CountCalls() as counted:
        direct = ours(x)
        assert counted.calls == 0
        with Record() as mode:
            y = ours(x)
        assert counted.calls == 1
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            yp = ours(x)
        assert counted.calls == 2
    assert "convt3d::conv_transpose3d" in mode.ops, mode.ops
    assert any(e.key == "convt3d::conv_transpose3d" for e in prof.key_averages())
    assert torch.equal(y, direct) and torch.equal(yp, direct)


@pytest.mark.parametrize("bias", [False, True])
def test_backward_with_requires_grad_weights(bias: bool) -> None:
    """Weights that require grad (grad enabled): the op records the graph; gradients match
    nn.ConvTranspose3d's (cuDNN) in fp64."""
    kw = dict(_DIRECT_CASES["s2_groups_bias"][0], bias=bias)
    ref, ours = make_pair(kw, seed=11)
    x = torch.randn(2, 8, 5, 6, 7, device=DEV, dtype=torch.float64)
    with _CountCalls() as counted:
        y = ours(x)
    assert counted.calls == 1 and y.grad_fn is not None
    y.square().sum().backward()
    ref(x).square().sum().backward()
    for a, r in zip(ours.parameters(), ref.parameters()):
        assert a.grad is not None
        assert rel_err(a.grad, r.grad) <= 1e-10
    assert rel_err(y.detach(), ref(x).detach()) <= 1e-10
