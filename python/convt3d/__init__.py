"""convt3d: fast nn.ConvTranspose3d forward on NVIDIA GPUs (autotuned NVRTC kernels).

``import convt3d`` needs neither PyTorch nor the shared library; ``convt3d.torch`` is the
PyTorch drop-in (ConvTranspose3d, conv_transpose3d, convert_model) and needs PyTorch >= 2.1;
``convt3d.kernelbench`` has KernelBench's Model (nn.ConvTranspose3d) and ModelNew (convt3d's).
``convt3d.distributed`` tunes a problem list on a Ray cluster (``python -m convt3d.distributed``).
The low-level ctypes binding of the C API is ``convt3d._lib`` (Engine, Plan, Problem).
"""

from ._lib import (
    Convt3dError,
    Engine,
    LibraryNotFoundError,
    Plan,
    Problem,
    library_path,
    output_size,
    validate,
)
from ._lib import version as library_version

__version__ = "0.1.0"

__all__ = [
    "Convt3dError",
    "Engine",
    "LibraryNotFoundError",
    "Plan",
    "Problem",
    "__version__",
    "library_path",
    "library_version",
    "output_size",
    "validate",
]
