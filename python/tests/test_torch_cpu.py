"""test_torch_cpu.py: convt3d.torch without a GPU: argument checks, module parity, state_dict,
convert_model, the custom op's fake/autograd registrations and gradcheck (CPU fallback path),
and the guard of the direct eager path (it asks no device).

Skipped as a whole, with the reason, when PyTorch is not installed.
"""

import copy
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU tests need it)")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convt3d.torch as ct  # noqa: E402
from helpers import functional_args, level1, random_config  # noqa: E402

KW = dict(in_channels=4, out_channels=6, kernel_size=(3, 2, 3), stride=(2, 1, 2),
          padding=(1, 0, 1), output_padding=(1, 0, 0), groups=2, bias=True, dilation=(1, 2, 1))


def test_op_is_registered() -> None:
    if not ct.HAS_CUSTOM_OP:
        pytest.skip(f"PyTorch {torch.__version__} has no torch.library.custom_op (needs 2.4)")
    assert hasattr(torch.ops.convt3d, "conv_transpose3d")


def test_module_is_a_drop_in() -> None:
    torch.manual_seed(0)
    ref = nn.ConvTranspose3d(**KW)
    torch.manual_seed(0)
    mod = ct.ConvTranspose3d(**KW)
    assert isinstance(mod, nn.ConvTranspose3d)
    # Same names, shapes and (same seed) the same default initialisation.
    assert [(k, v.shape) for k, v in mod.state_dict().items()] == [
        (k, v.shape) for k, v in ref.state_dict().items()
    ]
    assert mod.weight.shape == (4, 3, 3, 2, 3) and mod.bias.shape == (6,)
    for k, v in ref.state_dict().items():
        assert torch.equal(mod.state_dict()[k], v), k
    assert repr(mod) == repr(ref)


def test_state_dict_loads_both_ways() -> None:
    a, b = nn.ConvTranspose3d(**KW), ct.ConvTranspose3d(**KW)
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    c = nn.ConvTranspose3d(**KW)
    c.load_state_dict(ct.ConvTranspose3d(**KW).state_dict())
    a2 = nn.ConvTranspose3d(**{**KW, "bias": False})
    with pytest.raises(RuntimeError):  # strict loading still notices a missing bias
        ct.ConvTranspose3d(**{**KW, "bias": False}).load_state_dict(a.state_dict())
    ct.ConvTranspose3d(**{**KW, "bias": False}).load_state_dict(a2.state_dict())


def test_constructor_errors_match_pytorch() -> None:
    for bad in (dict(padding_mode="reflect"), dict(groups=4), dict(in_channels=3)):
        with pytest.raises(ValueError):
            nn.ConvTranspose3d(**{**KW, **bad})
        with pytest.raises(ValueError):
            ct.ConvTranspose3d(**{**KW, **bad})
    with pytest.raises(ValueError, match="pass torch.bfloat16 tensors"):
        ct.ConvTranspose3d(**KW, precision="bf16")
    with pytest.raises(ValueError, match="precision"):
        ct.ConvTranspose3d(**KW, precision="fast")


def test_dtype_and_device_kwargs() -> None:
    m = ct.ConvTranspose3d(**KW, dtype=torch.float64, device="cpu")
    assert m.weight.dtype == torch.float64 and m.bias.device.type == "cpu"
    m = ct.ConvTranspose3d(**KW, device="meta")
    assert m.weight.is_meta


def test_cpu_fallback_equals_pytorch() -> None:
    torch.manual_seed(1)
    ref = nn.ConvTranspose3d(**KW).double()
    mod = ct.ConvTranspose3d(**KW).double()
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 5, 4, 3, dtype=torch.float64)
    assert torch.equal(mod(x), ref(x))
    assert torch.equal(mod(x[0]), ref(x[0]))  # unbatched input
    size = [10, 6, 6]  # output_size picks output_padding, as in nn.ConvTranspose3d
    assert torch.equal(mod(x, output_size=size), ref(x, output_size=size))
    xt = x.transpose(3, 4).contiguous().transpose(3, 4)  # non-contiguous
    assert torch.equal(mod(xt), ref(xt))


@pytest.mark.parametrize("seed", range(20))
def test_functional_cpu_random(seed: int) -> None:
    cfg = random_config(seed)
    kw = cfg["module"]
    torch.manual_seed(seed)
    w = torch.randn(kw["in_channels"], kw["out_channels"] // kw["groups"], *kw["kernel_size"],
                    dtype=torch.float64)
    b = torch.randn(kw["out_channels"], dtype=torch.float64) if kw["bias"] else None
    x = torch.randn(*cfg["input"], dtype=torch.float64)
    fa = functional_args(kw)
    assert torch.equal(ct.conv_transpose3d(x, w, b, **fa), F.conv_transpose3d(x, w, b, **fa))


def _bad_cases():
    x = torch.randn(1, 4, 3, 3, 3)
    w = torch.randn(4, 3, 2, 2, 2)
    return [
        ("input not a tensor", ([1.0], w), {}),
        ("weight not a tensor", (x, "w"), {}),
        ("3-D input", (x[0, 0], w), {}),
        ("channel mismatch", (torch.randn(1, 5, 3, 3, 3), w), {}),
        ("zero stride", (x, w), dict(stride=0)),
        ("negative padding", (x, w), dict(padding=-1)),
        ("negative output_padding", (x, w), dict(output_padding=(0, -1, 0))),
        ("zero dilation", (x, w), dict(dilation=(1, 0, 1))),
        ("zero groups", (x, w), dict(groups=0)),
        ("groups do not divide C_in", (x, w), dict(groups=3)),
        ("two strides", (x, w), dict(stride=(1, 2))),  # lenient: see below
        ("float stride", (x, w), dict(stride=(1.5, 1, 1))),
        ("output_padding too large", (x, w), dict(stride=2, output_padding=2)),
        ("output too small", (x, torch.randn(4, 3, 1, 1, 1)), dict(padding=2)),
        ("bias size", (x, w, torch.randn(5)), {}),
        ("bias dtype", (x, w, torch.randn(3, dtype=torch.float64)), {}),
        ("weight dtype", (x, w.double()), {}),
        ("bias not a tensor", (x, w, 3.0), {}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_argument_errors_match_functional(case: int) -> None:
    """Each bad call raises the exception type F.conv_transpose3d raises for it."""
    name, args, kwargs = _bad_cases()[case]
    with pytest.raises(Exception) as theirs:
        F.conv_transpose3d(*args, **kwargs)
    with pytest.raises(Exception) as ours:
        ct.conv_transpose3d(*args, **kwargs)
    if name == "two strides":  # PyTorch's argument parser may refuse the length (TypeError)
        assert isinstance(ours.value, (RuntimeError, TypeError)), ours.value
        return
    assert isinstance(ours.value, type(theirs.value)), (
        f"{name}: F raised {type(theirs.value).__name__}({theirs.value}), "
        f"convt3d raised {type(ours.value).__name__}({ours.value})"
    )


def test_precision_argument() -> None:
    x, w = torch.randn(1, 2, 3, 3, 3), torch.randn(2, 2, 2, 2, 2)
    ct.conv_transpose3d(x, w, precision="fp32")
    with pytest.raises(ValueError, match="pass torch.bfloat16 tensors"):
        ct.conv_transpose3d(x, w, precision="bf16")
    with pytest.raises(ValueError, match="pass torch.float16 tensors"):
        ct.conv_transpose3d(x, w, precision="fp16")
    with pytest.raises(ValueError, match="precision"):
        ct.conv_transpose3d(x, w, precision="fp64")


def test_convert_model_in_place() -> None:
    class Sub(nn.ConvTranspose3d):  # a user's subclass may override forward: left alone
        pass

    torch.manual_seed(2)
    model = nn.Sequential(
        nn.ConvTranspose3d(4, 4, 3, padding=1),
        nn.ReLU(),
        nn.Sequential(nn.ConvTranspose3d(4, 2, 2, stride=2, bias=False)),
        Sub(2, 2, 1),
    ).double()
    calls = []
    model[0].register_forward_hook(lambda m, i, o: calls.append(1))
    params = [id(p) for p in model.parameters()]
    x = torch.randn(1, 4, 3, 3, 3, dtype=torch.float64)
    expected = model(x)
    model.eval()
    assert ct.convert_model(model) is model
    assert type(model[0]) is ct.ConvTranspose3d and type(model[2][0]) is ct.ConvTranspose3d
    assert type(model[3]) is Sub
    assert [id(p) for p in model.parameters()] == params  # same Parameter objects
    assert not model.training and model[0].weight.dtype == torch.float64
    assert torch.equal(model(x), expected)
    assert len(calls) == 2  # the hook survived the swap
    single = nn.ConvTranspose3d(2, 2, 1)
    assert type(ct.convert_model(single)) is ct.ConvTranspose3d
    clone = copy.deepcopy(model)
    assert type(clone[0]) is ct.ConvTranspose3d


def test_meta_tensors_use_the_fake_implementation() -> None:
    if not ct.HAS_CUSTOM_OP:
        pytest.skip("needs torch.library.custom_op (PyTorch >= 2.4)")
    for p in level1(scale=False):
        kw = p["module"]
        m = ct.ConvTranspose3d(**kw, device="meta")
        y = m(torch.empty(*p["input"], device="meta"))
        assert list(y.shape) == p["output"], p["name"]
        assert y.is_meta


def test_opcheck() -> None:
    if not ct.HAS_CUSTOM_OP or not hasattr(torch.library, "opcheck"):
        pytest.skip("needs torch.library.custom_op and opcheck (PyTorch >= 2.4)")
    x = torch.randn(2, 4, 3, 4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    args = (x, w, b, [2, 1, 2], [1, 0, 1], [1, 0, 0], 2, [1, 2, 1], "fp32")
    torch.library.opcheck(torch.ops.convt3d.conv_transpose3d.default, args)
    torch.library.opcheck(torch.ops.convt3d.conv_transpose3d.default,
                          (x, w, None) + args[3:])


GRAD_CASES = [
    dict(stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0), groups=2,
         dilation=(1, 2, 1)),
    # output_padding >= stride (allowed since it is < dilation): grad_input needs the crop.
    dict(stride=1, padding=0, output_padding=(1, 0, 1), groups=1, dilation=2),
    dict(stride=3, padding=2, output_padding=2, groups=1, dilation=1),
]


@pytest.mark.parametrize("case", range(len(GRAD_CASES)))
def test_gradcheck_cpu_float64(case: int) -> None:
    kw = GRAD_CASES[case]
    g = kw["groups"]
    torch.manual_seed(case)
    x = torch.randn(2, 2 * g, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2 * g, 2, 2, 3, 2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2 * g, dtype=torch.float64, requires_grad=True)

    def fn(x, w, b):
        return ct.conv_transpose3d(x, w, b, **kw)

    assert torch.autograd.gradcheck(fn, (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: ct.conv_transpose3d(x, w, None, **kw), (x, w))
    # And the same gradients as PyTorch's own op.
    ours = torch.autograd.grad(fn(x, w, b).square().sum(), (x, w, b))
    theirs = torch.autograd.grad(F.conv_transpose3d(x, w, b, **kw).square().sum(), (x, w, b))
    for a, t in zip(ours, theirs):
        torch.testing.assert_close(a, t, rtol=1e-12, atol=1e-12)


def test_grad_of_input_only() -> None:
    x = torch.randn(1, 2, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 2, 2, 2, 2, dtype=torch.float64)
    (gx,) = torch.autograd.grad(ct.conv_transpose3d(x, w, stride=2).sum(), (x,))
    (ex,) = torch.autograd.grad(F.conv_transpose3d(x, w, stride=2).sum(), (x,))
    torch.testing.assert_close(gx, ex)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_cpu(backend: str) -> None:
    """No graph break through the wrapper and the custom op (the op runs its CPU fallback)."""
    if not ct.HAS_CUSTOM_OP:
        pytest.skip("torch.compile support needs torch.library.custom_op (PyTorch >= 2.4)")
    torch._dynamo.reset()
    model = nn.Sequential(ct.ConvTranspose3d(**KW), nn.ReLU()).double()
    x = torch.randn(2, 4, 4, 3, 4, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    y = compiled(x)
    torch.testing.assert_close(y, model(x))
    y.sum().backward()
    assert x.grad is not None


def test_weight_version_is_unique_per_tensor_and_follows_in_place_changes() -> None:
    a, b = torch.zeros(3), torch.zeros(3)
    va, vb = ct._weight_version(a), ct._weight_version(b)
    assert va is not None and vb is not None and va != vb  # same values, other tensors
    assert ct._weight_version(a) == va
    a.add_(1)  # in place: same identity (high 32 bits), another version counter value
    va2 = ct._weight_version(a)
    assert va2 != va and va2 >> 32 == va >> 32
    with torch.inference_mode():
        t = torch.zeros(2)  # no version counter: pack on every call
    assert ct._weight_version(t) is None
    # The identity lives in the module, not on the tensor: copies and checkpoints never carry it.
    p = torch.nn.Parameter(torch.zeros(2))
    vp = ct._weight_version(p)
    assert vp is not None and not hasattr(p, "_convt3d_weight_id")
    assert ct._weight_version(copy.deepcopy(p)) >> 32 != vp >> 32
    ct.configure(weight_versions=False)
    try:
        assert ct._weight_version(a) is None
    finally:
        ct.configure(weight_versions=True)


def test_configure_switches_vendor_candidates() -> None:
    assert ct._config.vendor_candidates
    ct.configure(vendor_candidates=False)
    try:
        assert not ct._config.vendor_candidates
    finally:
        ct.configure(vendor_candidates=True)
    assert ct._config.vendor_candidates


def test_configure_fp32x3_fp16_reaches_the_engine_options() -> None:
    """configure(fp32x3_fp16=True) is passed to every engine made from then on (and so to the C
    options' field); the default keeps fp32x3 on 3xTF32."""
    assert not ct._config.fp32x3_fp16
    made = []

    class FakeEngine:
        def __init__(self, **kwargs) -> None:
            made.append(kwargs)

    real = ct._lib.Engine
    ct._lib.Engine = FakeEngine
    try:
        ct.configure()  # forgets the engines made so far
        ct._engine(0, "fp32x3")
        ct.configure(fp32x3_fp16=True)
        assert ct._config.fp32x3_fp16
        ct._engine(0, "fp32x3")
    finally:
        ct._lib.Engine = real
        ct.configure(fp32x3_fp16=False)
    assert [m["fp32x3_fp16"] for m in made] == [False, True]
    assert not ct._config.fp32x3_fp16


# ---- The direct eager path's guard (_direct_allowed asks no device; CPU tensors suffice) ------
def _guard_tensors(requires_grad: bool = False):
    """x, w, b as conv_transpose3d passes them to the guard, and a check that the guard lets
    them through outside any context, so that each refusal below is the context's doing."""
    if not ct.HAS_CUSTOM_OP:
        pytest.skip("the direct path needs torch.library.custom_op (PyTorch >= 2.4)")
    x = torch.randn(2, 4, 3, 3, 3)
    w = nn.Parameter(torch.randn(4, 3, 2, 2, 2), requires_grad=requires_grad)
    b = torch.randn(3)
    with torch.no_grad():
        assert ct._direct_allowed(x, w, b)
    return x, w, b


def test_direct_guard_allows_plain_tensors() -> None:
    x, w, b = _guard_tensors()
    assert ct._direct_allowed(x, w, b)  # grad enabled, but nothing requires it
    assert ct._direct_allowed(x, w, None)
    assert ct._direct_allowed(x, w.detach(), b)  # Parameter or plain Tensor
    _, wg, _ = _guard_tensors(requires_grad=True)
    with torch.no_grad():  # requires_grad, but no graph is recorded
        assert ct._direct_allowed(x, wg, b)
    with torch.inference_mode():
        assert ct._direct_allowed(x, wg, b)
        assert ct._direct_allowed(torch.randn(2, 4, 3, 3, 3), torch.randn(4, 3, 2, 2, 2), None)


def test_direct_guard_refuses_when_autograd_records() -> None:
    x, w, b = _guard_tensors()
    for i in range(3):
        args = [x.clone(), w.detach().clone(), b.clone()]
        args[i].requires_grad_(True)
        assert not ct._direct_allowed(*args), i
        with torch.no_grad():
            assert ct._direct_allowed(*args), i
    assert not ct._direct_allowed(x, nn.Parameter(w.detach()), None)


def test_direct_guard_refuses_dispatch_modes() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x, w, b = _guard_tensors()
    with torch.no_grad(), Passthrough():
        assert not ct._direct_allowed(x, w, b)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.no_grad(), FakeTensorMode():  # an infra mode counts too
        assert not ct._direct_allowed(x, w, b)


def test_direct_guard_refuses_function_modes() -> None:
    from torch.overrides import TorchFunctionMode

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    x, w, b = _guard_tensors()
    with torch.no_grad(), Passthrough():
        assert not ct._direct_allowed(x, w, b)


def test_direct_guard_refuses_forward_ad() -> None:
    import torch.autograd.forward_ad as fwAD

    x, w, b = _guard_tensors()
    with torch.no_grad(), fwAD.dual_level():  # no_grad does not stop forward-mode AD
        dual = fwAD.make_dual(x, torch.ones_like(x))
        assert not ct._direct_allowed(dual, w, b)
        assert not ct._direct_allowed(x, w, b)  # a plain tensor in a dual level: still the op
    with torch.no_grad():
        assert ct._direct_allowed(x, w, b)


def test_direct_guard_refuses_jit_trace() -> None:
    x, w, b = _guard_tensors()
    seen = []

    def fn(x):
        seen.append(ct._direct_allowed(x, w.detach(), b))
        return x + 1

    with torch.no_grad():
        torch.jit.trace(fn, (x,), check_trace=False)
        fn(x)
    assert seen == [False, True]


def test_direct_guard_refuses_subclasses_and_fake_tensors() -> None:
    class Sub(torch.Tensor):
        pass

    x, w, b = _guard_tensors()
    with torch.no_grad():
        assert not ct._direct_allowed(x.as_subclass(Sub), w, b)
        assert not ct._direct_allowed(x, w, b.as_subclass(Sub))
        assert not ct._direct_allowed(x, w.detach().as_subclass(Sub), b)
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fake = mode.from_tensor(x)
    with torch.no_grad():  # outside the mode: the type test refuses it
        assert not ct._direct_allowed(fake, w, b)


@pytest.mark.parametrize("kind", ["torch.profiler", "autograd.profiler"])
def test_direct_guard_refuses_profilers(kind: str) -> None:
    x, w, b = _guard_tensors()
    if kind == "torch.profiler":
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    else:
        prof = torch.autograd.profiler.profile()
    with torch.no_grad(), prof:
        assert not ct._direct_allowed(x, w, b)
    with torch.no_grad():
        assert ct._direct_allowed(x, w, b)


@pytest.mark.parametrize("transform", ["vmap", "grad", "jvp", "functionalize"])
def test_direct_guard_refuses_functorch_transforms(transform: str) -> None:
    x, w, b = _guard_tensors()
    w, plain = w.detach(), x.clone()
    seen, wrapped = [], []

    def fn(xt):
        seen.append(ct._direct_allowed(xt, w, b))
        seen.append(ct._direct_allowed(plain, w, b))  # unwrapped tensors inside the transform
        wrapped.append(xt)
        return xt.sin().sum()

    if transform == "vmap":
        torch.vmap(fn)(x)
    elif transform == "grad":
        torch.func.grad(fn)(x)
    elif transform == "jvp":
        torch.func.jvp(fn, (x,), (torch.ones_like(x),))
    else:
        torch.func.functionalize(fn)(x)
    assert seen == [False, False]
    # A wrapper that escaped its transform is an exact torch.Tensor outside any level.
    with torch.no_grad():
        assert not ct._direct_allowed(wrapped[0], w, b)
        assert ct._direct_allowed(plain, w, b)


def test_direct_guard_folds_to_false_under_compile() -> None:
    """torch.compile traces the guard as False (the op goes into the graph), with no break."""
    x, w, b = _guard_tensors()
    w = w.detach()

    def fn(x):
        return x + 1 if ct._direct_allowed(x, w, b) else x - 1

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), x - 1)
    assert torch.equal(fn(x), x + 1)


def test_direct_guard_opt_out() -> None:
    x, w, b = _guard_tensors()
    ct.configure(direct_eager=False)
    try:
        assert not ct._config.direct_eager
        with torch.no_grad():
            assert not ct._direct_allowed(x, w, b)
    finally:
        ct.configure(direct_eager=True)
    assert ct._direct_allowed(x, w, b)
    for value, expected in (("0", False), ("1", True)):
        os.environ["CONVT3D_DIRECT_EAGER"] = value
        try:
            assert ct._Config().direct_eager is expected, value
        finally:
            del os.environ["CONVT3D_DIRECT_EAGER"]
    assert ct._Config().direct_eager


def test_direct_guard_is_false_when_a_private_query_is_missing() -> None:
    """A PyTorch without one of the queries gets the op, not an AttributeError."""
    x, w, b = _guard_tensors()
    name = "_len_torch_dispatch_stack"
    query = getattr(torch._C, name)
    delattr(torch._C, name)
    try:
        assert not ct._direct_allowed(x, w, b)
    finally:
        setattr(torch._C, name, query)
    assert ct._direct_allowed(x, w, b)


def test_cpu_calls_keep_the_op() -> None:
    """The direct path is for CUDA tensors only: CPU calls go through the op (its CPU fallback)
    even where the guard allows the direct path."""
    x, w, b = _guard_tensors()
    calls = []
    real_call, real_forward = ct._call, ct._forward_cuda

    def call(*args):
        calls.append(1)
        return real_call(*args)

    def forward_cuda(*args):
        raise AssertionError("_forward_cuda called for CPU tensors")

    ct._call, ct._forward_cuda = call, forward_cuda
    try:
        with torch.no_grad():
            y = ct.conv_transpose3d(x, w, b, stride=2)
    finally:
        ct._call, ct._forward_cuda = real_call, real_forward
    assert calls == [1]
    assert torch.equal(y, F.conv_transpose3d(x, w.detach(), b, stride=2))
