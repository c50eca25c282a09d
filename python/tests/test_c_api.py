"""test_c_api.py: the C API through ctypes (convt3d._lib); needs neither PyTorch nor a GPU."""

import ctypes
import json
import os
import subprocess
import sys

import pytest

from helpers import LEVEL1, REPO

from convt3d import _lib

try:
    _lib.load()
    NO_LIB = ""
except OSError as e:  # LibraryNotFoundError
    NO_LIB = f"libconvt3d.so not built: {e}"


def setup_module() -> None:
    if NO_LIB:
        pytest.skip(NO_LIB)


def small(**overrides) -> _lib.Problem:
    kw = dict(n=2, c_in=4, c_out=6, in_size=(3, 4, 5), kernel=3)
    kw.update(overrides)
    return _lib.Problem(**kw)


def test_version_and_abi() -> None:
    assert _lib.version() == "0.1.0"
    assert _lib.load().convt3d_abi_version() == _lib.ABI_VERSION
    for code, name in _lib.STATUS_NAMES.items():
        assert _lib.load().convt3d_status_name(code).decode() == name


def test_problem_normalises_triples_and_hashes() -> None:
    p = small(stride=2, padding=[1], dilation=(1, 2, 3))
    assert p.stride == (2, 2, 2) and p.padding == (1, 1, 1) and p.dilation == (1, 2, 3)
    assert hash(p) == hash(small(stride=(2, 2, 2), padding=1, dilation=[1, 2, 3]))
    with pytest.raises(ValueError):
        small(stride=(1, 2))


def test_output_size_matches_level1_file() -> None:
    doc = json.loads(LEVEL1.read_text())
    for j in doc["problems"]:
        p = _lib.Problem(
            n=j["input"][0],
            c_in=j["in_channels"],
            c_out=j["out_channels"],
            in_size=j["input"][2:],
            kernel=j["kernel"],
            stride=j["stride"],
            padding=j["padding"],
            output_padding=j["output_padding"],
            dilation=j["dilation"],
            groups=j["groups"],
            bias=j["bias"],
        )
        assert _lib.output_size(p) == tuple(j["output"][2:]), j["name"]
        assert p.out_size() == tuple(j["output"][2:]), j["name"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(n=0), "n=0 must be positive"),
        (dict(c_in=-3), "c_in=-3 must be positive"),
        (dict(stride=(1, 0, 1)), "stride[1]=0 must be positive"),
        (dict(padding=(0, 0, -1)), "padding[2]=-1 must be >= 0"),
        (dict(dilation=(0, 1, 1)), "dilation[0]=0 must be positive"),
        (dict(groups=4), "c_out=6 must be divisible by groups=4"),
        (dict(output_padding=(1, 0, 0)), "output_padding[0]=1 must be smaller than stride[0]"),
        (dict(padding=(5, 0, 0)), "output size along D"),
    ],
)
def test_validation_errors_name_the_field(overrides, message) -> None:
    p = small(**overrides)
    with pytest.raises(_lib.Convt3dError) as info:
        _lib.validate(p)
    assert info.value.code == _lib.INVALID_ARGUMENT
    assert info.value.status_name == "INVALID_ARGUMENT"
    assert message in info.value.message, info.value.message
    assert message in str(info.value)
    with pytest.raises(_lib.Convt3dError):
        _lib.output_size(p)


def test_valid_problem_and_signature() -> None:
    _lib.validate(small())
    assert _lib.signature(small(bias=True, dtype="f64")) == (
        "f64_n2_ci4_co6_i3x4x5_k3x3x3_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b1"
    )
    with pytest.raises(ValueError, match="dtype"):
        small(dtype="f8").to_c()


@pytest.mark.parametrize("dtype, code", [("f32", 0), ("f64", 1), ("bf16", 2), ("f16", 3)])
def test_dtypes_convert_both_ways(dtype: str, code: int) -> None:
    p = small(dtype=dtype, bias=True, stride=2)
    c = p.to_c()
    assert c.dtype == code == _lib.DTYPES[dtype]
    assert _lib.Problem.from_c(c) == p
    _lib.validate(p)
    assert _lib.output_size(p) == (7, 9, 11)
    assert _lib.signature(p) == (
        f"{dtype}_n2_ci4_co6_i3x4x5_k3x3x3_s2x2x2_p0x0x0_op0x0x0_d1x1x1_g1_b1"
    )


def test_unknown_dtype_value_is_refused_by_the_library() -> None:
    """A dtype value outside convt3d_dtype_t, sent straight through the C struct."""
    c = small().to_c()
    c.dtype = 7
    lib = _lib.load()
    assert lib.convt3d_validate(ctypes.byref(c)) == _lib.INVALID_ARGUMENT
    message = lib.convt3d_last_error().decode()
    assert "dtype=7 is not supported" in message, message
    assert "CONVT3D_DTYPE_BF16=2" in message and "CONVT3D_DTYPE_F16=3" in message, message


def test_precision_names() -> None:
    assert _lib.precision_code("fp32") == 0
    assert _lib.precision_code("tf32") == 1
    assert _lib.precision_code("fp32x3") == 2
    # 16-bit is a tensor dtype, not a precision: the error says which tensors to pass.
    for name, torch_dtype in (("bf16", "bfloat16"), ("f16", "float16"), ("fp16", "float16")):
        with pytest.raises(ValueError, match=f"pass torch.{torch_dtype} tensors"):
            _lib.precision_code(name)
    with pytest.raises(ValueError, match="precision"):
        _lib.precision_code("fp8")


def test_engine_options_are_checked() -> None:
    with pytest.raises(ValueError, match="policy"):
        _lib.Engine(policy="sometimes", cache_path=":memory:")
    with pytest.raises(ValueError, match="bfloat16"):
        _lib.Engine(precision="bf16", cache_path=":memory:")
    with pytest.raises(_lib.Convt3dError, match="repeats=0"):
        _lib.Engine(repeats=0, cache_path=":memory:")
    with pytest.raises(_lib.Convt3dError, match="device=-1"):
        _lib.Engine(device=-1, cache_path=":memory:")


def test_engine_and_plan_without_gpu() -> None:
    engine = _lib.Engine(policy="never", cache_path=":memory:")
    assert engine.cache_path == ":memory:"
    assert engine.nvrtc_compiles == 0
    with pytest.raises(_lib.Convt3dError, match=r"stride\[2\]=-1") as info:
        engine.plan(small(stride=(1, 1, -1)))
    assert info.value.code == _lib.INVALID_ARGUMENT
    for dtype in ("f32", "bf16", "f16"):
        try:
            plan = engine.plan(small(dtype=dtype))
        except _lib.Convt3dError as e:  # the expected outcome on a machine without a GPU
            assert e.code == _lib.FAILED_PRECONDITION, e
            assert "no usable GPU" in e.message
        else:  # a GPU machine: the heuristic plan of the same problem
            assert plan.source == "heuristic" and plan.kernel_name
            assert plan.problem == small(dtype=dtype)
    engine.close()
    engine.close()  # idempotent


def test_background_policy_and_plan_origin() -> None:
    """policy="background" reaches the library; a plan (GPU only) reports its lookup tier."""
    assert _lib.POLICIES["background"] == 4
    engine = _lib.Engine(policy="background", cache_path=":memory:")
    try:
        plan = engine.plan(small())
    except _lib.Convt3dError as e:  # no GPU here
        assert e.code == _lib.FAILED_PRECONDITION, e
    else:  # an empty cache: the heuristic pick at once, tuned on the engine's worker thread
        origin = plan.origin
        assert origin["tier"] == 5 and origin["name"] == "heuristic", origin
        assert "tuning in the background" in origin["reason"]
        assert "tier 1 exact: no entry" in origin["reason"]
    engine.close()


def test_library_lookup_order_and_errors() -> None:
    """CONVT3D_LIBRARY wins, a missing one is named; run in a child so the parent's stays."""
    code = (
        "import convt3d\n"
        "from convt3d import _lib\n"
        "try:\n"
        "    _lib.load()\n"
        "except _lib.LibraryNotFoundError as e:\n"
        "    print('ERR', e)\n"
        "else:\n"
        "    print('OK', _lib.library_path())\n"
    )
    env = dict(os.environ, CONVT3D_LIBRARY="/nonexistent/libconvt3d.so")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.startswith("ERR"), out.stdout + out.stderr
    assert "/nonexistent/libconvt3d.so (missing)" in out.stdout
    assert "CONVT3D_LIBRARY" in out.stdout
    env["CONVT3D_LIBRARY"] = _lib.library_path()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == f"OK {_lib.library_path()}", out.stdout + out.stderr


def test_import_needs_no_torch_or_library() -> None:
    code = "import sys, convt3d; assert 'torch' not in sys.modules; print(convt3d.__version__)"
    env = dict(os.environ, CONVT3D_LIBRARY="/nonexistent/libconvt3d.so")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "0.1.0", out.stderr


def test_torch_module_without_torch_says_to_install_it() -> None:
    # sys.modules["torch"] = None makes `import torch` fail as if PyTorch were not installed.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "try:\n"
        "    import convt3d.torch\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.startswith("ImportError convt3d.torch needs PyTorch"), out.stdout + out.stderr
    assert "pip install torch" in out.stdout


def test_fp16_names_f16_as_on_the_command_line() -> None:
    assert small(dtype="fp16").to_c().dtype == _lib.DTYPES["f16"]
    with pytest.raises(ValueError, match="or fp16"):
        small(dtype="half16").to_c()


def test_fp32x3_fp16_reaches_the_engine() -> None:
    """Engine(fp32x3_fp16=True) sets the C options' field (ABI version 3); the engine then opts in
    to fp32x3's 3xFP16 tiles and its first log line says so (no GPU needed)."""
    o = _lib._COptions()
    _lib.load().convt3d_options_init(ctypes.byref(o))
    assert o.fp32x3_fp16 == 0 and o.vendor_candidates == 1
    code = (
        "import sys\n"
        "from convt3d import _lib\n"
        "e = _lib.Engine(policy='never', cache_path=':memory:', verbose=True,\n"
        "                fp32x3_fp16=sys.argv[1] == '1')\n"
        "e.close()\n"
    )
    env = dict(os.environ, CONVT3D_LIBRARY=str(_lib.library_path()), CONVT3D_FP32X3_FP16="0")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    for on in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", code, on], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert ("3xFP16 tiles (opt-in" in out.stderr) == (on == "1"), out.stderr
