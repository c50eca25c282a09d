"""test_weights_gpu.py: weights packed once per plan (convt3d.torch passes a weight version).

A plan whose kernel re-lays the weights into its workspace (tensor-core, Winograd, FFT) does so
again only when the weight tensor or its in-place version counter changes. Checked against an
fp64 CPU reference: optimizer-style in-place updates, a new weight tensor at a freed one's
address, CUDA graph replays after in-place updates, and configure(weight_versions=False).
Skipped with the reason when there is no PyTorch, no CUDA device or no libconvt3d.so.
"""

import re

import pytest

from helpers import functional_args, no_cuda_reason

_REASON = no_cuda_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import convt3d.torch as ct  # noqa: E402

DEV = "cuda"
# bf16, 24 -> 40 channels, strided: the heuristic pick is a tensor-core kernel that packs.
KW = dict(in_channels=24, out_channels=40, kernel_size=(3, 2, 3), stride=(2, 1, 2),
          padding=(1, 0, 1), output_padding=(1, 0, 0), bias=True)
DTYPE = torch.bfloat16
TOL = 1e-2
PACKING = re.compile(r"(lattice_|subpixel_)?(igemm_mma|igemm_wgmma|gemm_wgmma|winograd|fft)_")


def setup_module() -> None:
    ct.configure(policy="never", cache_path=":memory:", weight_versions=True)


def teardown_module() -> None:
    ct.configure(policy="tune_if_missing", cache_path="", weight_versions=True)


def rel_l2(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(y).all():
        return float("inf")
    return ((y - ref).norm() / (ref.norm() or 1.0)).item()


def reference(x, w, b) -> torch.Tensor:
    return F.conv_transpose3d(x.detach().double().cpu(), w.detach().double().cpu(),
                              b.detach().double().cpu(), **functional_args(KW))


def layer_and_input(seed: int = 0):
    torch.manual_seed(seed)
    layer = ct.ConvTranspose3d(**KW).to(DEV, DTYPE)
    x = torch.randn(2, 24, 4, 5, 10, device=DEV, dtype=DTYPE)
    return layer, x


def plan_packs() -> bool:
    names = [p["kernel"] for p in ct.plans() if p["problem"].dtype == "bf16"]
    return any(PACKING.match(n) for n in names)


def test_in_place_updates_are_seen() -> None:
    layer, x = layer_and_input(1)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    with torch.no_grad():
        assert rel_l2(layer(x), reference(x, layer.weight, layer.bias)) <= TOL
    for _ in range(3):  # optimizer steps change the weights in place (and bump _version)
        layer.zero_grad()
        layer(x).float().square().mean().backward()
        opt.step()
        with torch.no_grad():
            y = layer(x)
        assert rel_l2(y, reference(x, layer.weight, layer.bias)) <= TOL
    with torch.no_grad():
        layer.weight.copy_(torch.randn_like(layer.weight))  # copy_ under no_grad bumps it too
        assert rel_l2(layer(x), reference(x, layer.weight, layer.bias)) <= TOL


def test_writes_behind_the_version_counter_need_weight_versions_off() -> None:
    layer, x = layer_and_input(2)
    with torch.no_grad():
        y_old = layer(x)
        assert rel_l2(y_old, reference(x, layer.weight, layer.bias)) <= TOL
        if not plan_packs():
            pytest.skip(f"this GPU's plan does not pack weights: {ct.plans()}")
        # .data has a version counter of its own: PyTorch does not count this write. The plan
        # keeps the weights it packed (undefined by contract; this shows the pack was skipped).
        layer.weight.data.mul_(-1.0)
        assert rel_l2(layer(x), y_old) <= 1e-6
        ct.configure(weight_versions=False)
        try:
            assert rel_l2(layer(x), reference(x, layer.weight, layer.bias)) <= TOL
            layer.weight.data.mul_(0.5)  # now every call packs
            assert rel_l2(layer(x), reference(x, layer.weight, layer.bias)) <= TOL
        finally:
            ct.configure(weight_versions=True)


def test_new_weight_tensor_at_a_freed_address() -> None:
    # Functional calls with a weight computed per call (as weight_norm does): the caching
    # allocator hands the same address back, with the same version (0). Each must be used.
    torch.manual_seed(3)
    base = torch.randn(24, 40, 3, 2, 3, device=DEV, dtype=DTYPE)
    b = torch.randn(40, device=DEV, dtype=DTYPE)
    x = torch.randn(2, 24, 4, 5, 10, device=DEV, dtype=DTYPE)
    args = dict(stride=KW["stride"], padding=KW["padding"], output_padding=KW["output_padding"])
    addresses = set()
    with torch.no_grad():
        for k in range(1, 5):
            w = base * float(k)
            addresses.add(w.data_ptr())
            y = ct.conv_transpose3d(x, w, b, **args)
            assert rel_l2(y, reference(x, w, b)) <= TOL, k
            del w, y
    print(f"{len(addresses)} distinct weight addresses over 4 calls")


def test_cuda_graph_replays_see_in_place_updates() -> None:
    layer, x = layer_and_input(4)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):  # plan outside capture
        for _ in range(2):
            layer(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = layer(x)
    for seed in range(3):
        torch.manual_seed(10 + seed)
        with torch.no_grad():
            layer.weight.copy_(torch.randn_like(layer.weight))
        g.replay()
        torch.cuda.synchronize()
        assert rel_l2(static_y, reference(x, layer.weight, layer.bias)) <= TOL, seed
        # Eager calls on the same plan between replays: still the current weights.
        with torch.no_grad():
            assert rel_l2(layer(x), reference(x, layer.weight, layer.bias)) <= TOL, seed
