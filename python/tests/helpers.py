"""helpers.py: shared test helpers: problem files, random configurations, skip reasons."""

import json
import os
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
LEVEL1 = REPO / "problems" / "kernelbench_l1.json"


def torch_or_none() -> Optional[Any]:
    """PyTorch if it can be imported, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def no_cuda_reason() -> str:
    """"" when PyTorch sees an NVIDIA GPU and libconvt3d.so loads, else why not."""
    torch = torch_or_none()
    if torch is None:
        return "PyTorch is not installed"
    if torch.version.hip is not None:
        return "ROCm build of PyTorch (convt3d needs an NVIDIA GPU)"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no GPU or no driver)"
    from convt3d import _lib

    try:
        _lib.load()
    except OSError as e:
        return str(e)
    return ""


def level1(scale: bool = True) -> List[Dict[str, Any]]:
    """The seven KernelBench level-1 problems as nn.ConvTranspose3d keyword arguments.

    Each item: name, input shape, and ``module`` (kwargs for nn.ConvTranspose3d). With
    ``scale``, batch becomes 2 and each spatial size a quarter (at least 3), so fp64 checks are
    quick; the layer's hyperparameters are kept.
    """
    doc = json.loads(LEVEL1.read_text())
    out = []
    for p in doc["problems"]:
        shape = list(p["input"])
        if scale:
            shape = [min(shape[0], 2), shape[1]] + [max(3, s // 4) for s in shape[2:]]
        out.append(
            {
                "name": p["name"],
                "input": shape,
                "output": p["output"],
                "cudnn_h200_ms": p.get("cudnn_h200_ms", {}),
                "module": dict(
                    in_channels=p["in_channels"],
                    out_channels=p["out_channels"],
                    kernel_size=tuple(p["kernel"]),
                    stride=tuple(p["stride"]),
                    padding=tuple(p["padding"]),
                    output_padding=tuple(p["output_padding"]),
                    groups=p["groups"],
                    bias=p["bias"],
                    dilation=tuple(p["dilation"]),
                ),
            }
        )
    return out


def random_config(seed: int) -> Dict[str, Any]:
    """A small valid configuration: asymmetric kernels, stride above the kernel, dilation,
    output_padding (also >= stride where dilation allows it), groups, bias, odd sizes."""
    rng = random.Random(seed)
    while True:
        groups = rng.choice([1, 1, 1, 2, 3, 4])
        c_in = groups * rng.randint(1, 4)
        c_out = groups * rng.randint(1, 4)
        k = [rng.randint(1, 5) for _ in range(3)]
        s = [rng.choice([1, 1, 2, 2, 3, 4, 6]) for _ in range(3)]
        d = [rng.choice([1, 1, 1, 2, 3]) for _ in range(3)]
        p = [rng.randint(0, 3) for _ in range(3)]
        op = [rng.randint(0, max(si, di) - 1) for si, di in zip(s, d)]
        size = [rng.randint(1, 9) for _ in range(3)]
        out = [(size[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 for i in range(3)]
        if all(o > 0 for o in out):
            break
    return {
        "input": [rng.randint(1, 3), c_in] + size,
        "module": dict(
            in_channels=c_in,
            out_channels=c_out,
            kernel_size=tuple(k),
            stride=tuple(s),
            padding=tuple(p),
            output_padding=tuple(op),
            groups=groups,
            bias=rng.random() < 0.5,
            dilation=tuple(d),
        ),
    }


def functional_args(module_kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The F.conv_transpose3d keyword arguments that match nn.ConvTranspose3d kwargs
    (nn.ConvTranspose3d's defaults for the ones not given)."""
    m = module_kwargs
    return dict(
        stride=m.get("stride", 1),
        padding=m.get("padding", 0),
        output_padding=m.get("output_padding", 0),
        groups=m.get("groups", 1),
        dilation=m.get("dilation", 1),
    )


def env_int(name: str, default: int) -> int:
    """An integer from the environment (tests read their sizes from CONVT3D_TEST_*)."""
    value = os.environ.get(name)
    return int(value) if value else default
