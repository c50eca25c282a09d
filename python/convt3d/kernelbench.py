"""KernelBench's two models for nn.ConvTranspose3d problems (needs PyTorch).

``Model`` is the reference, one nn.ConvTranspose3d; ``ModelNew`` is the same model with
convt3d's layer. Both keep the layer as ``conv_transpose3d``, so their state_dicts have the same
keys and load into each other:

    model = Model(in_channels=32, out_channels=16, kernel_size=3).cuda()
    new = ModelNew(in_channels=32, out_channels=16, kernel_size=3).cuda()
    new.load_state_dict(model.state_dict())
"""

import torch.nn as nn
from torch import Tensor

from .torch import ConvTranspose3d

__all__ = ["Model", "ModelNew"]


class _OneLayer(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.conv_transpose3d = layer

    def forward(self, x: Tensor) -> Tensor:
        return self.conv_transpose3d(x)


class Model(_OneLayer):
    """KernelBench's reference: one nn.ConvTranspose3d(**kw)."""

    def __init__(self, **kw) -> None:
        super().__init__(nn.ConvTranspose3d(**kw))


class ModelNew(_OneLayer):
    """The same model with convt3d's ConvTranspose3d(**kw) (same parameters and state_dict)."""

    def __init__(self, **kw) -> None:
        super().__init__(ConvTranspose3d(**kw))
