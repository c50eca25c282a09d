"""test_kernelbench.py: KernelBench-style check: ModelNew (convt3d) against the fp64 result of
the reference Model (nn.ConvTranspose3d) with the same weights, torch.allclose(1e-4, 1e-4),
on the seven level-1 problems (scaled down; python/bench_kernelbench.py times the full ones)."""

import os

import pytest

from helpers import level1, no_cuda_reason

_REASON = no_cuda_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

import torch  # noqa: E402

import convt3d.torch as ct  # noqa: E402
from convt3d.kernelbench import Model, ModelNew  # noqa: E402


def setup_module() -> None:
    ct.configure(policy=os.environ.get("CONVT3D_TEST_POLICY", "never"), cache_path=":memory:")


def teardown_module() -> None:
    ct.configure(policy="tune_if_missing", cache_path="")


@pytest.mark.parametrize("index", range(7))
def test_allclose_to_fp64(index: int) -> None:
    p = level1(scale=True)[index]
    torch.manual_seed(index)
    model = Model(**p["module"]).cuda()
    new = ModelNew(**p["module"]).cuda()
    new.load_state_dict(model.state_dict())
    x = torch.randn(*p["input"], device="cuda")
    with torch.no_grad():
        ref64 = model.double()(x.double())
        y = new(x)
    assert y.dtype == torch.float32 and y.shape == ref64.shape
    err = (y.double() - ref64).abs().max().item()
    assert torch.allclose(y.double(), ref64, atol=1e-4, rtol=1e-4), f"{p['name']}: max err {err}"
