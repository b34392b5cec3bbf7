"""Plain ``nn.Module`` networks. No Lightning here.

The 3D U-Net of the research (:class:`UNet3d`; its spatially partitioned twin, with the same
parameters, is :class:`ensml.models.spatial.SpatialUNet3d`), the temporal networks
(:class:`ConvGRUUNet`, :class:`TimeUNet`), the research's per-grid-point affine layer
(:class:`LocalAffine`), EMOS (:class:`EMOS`; fitted by :func:`ensml.train.emos.fit_emos`) and the
station network :class:`DRN` (fitted by :func:`ensml.train.drn.fit_drn`). Tasks
build them by name through :func:`build_network`.
"""

from __future__ import annotations

from torch import nn

from ensml.errors import EnsmlError
from ensml.models.drn import DRN
from ensml.models.emos import EMOS
from ensml.models.local import LocalAffine
from ensml.models.temporal import ConvGRUUNet, TimeUNet
from ensml.models.unet3d import UNet3d

#: The networks :func:`build_network` knows, by the name a task's ``arch`` gives.
ARCHITECTURES: dict[str, type[nn.Module]] = {
    "unet3d": UNet3d,
    "convgru": ConvGRUUNet,
    "unet3d_time": TimeUNet,
}


def is_sequence_arch(arch: str) -> bool:
    """Whether ``arch`` takes lead time as a dimension ((B, L, C, D, H, W) input)."""
    return bool(getattr(ARCHITECTURES.get(arch), "sequence_input", False))


def build_network(arch: str, in_channels: int, out_channels: int, **kwargs) -> nn.Module:
    """Instantiate the network named ``arch`` (see :data:`ARCHITECTURES`)."""
    try:
        cls = ARCHITECTURES[arch]
    except KeyError:
        raise EnsmlError(f"unknown model arch {arch!r} (choose from: {', '.join(ARCHITECTURES)})") from None
    return cls(in_channels, out_channels, **kwargs)


__all__ = [
    "ARCHITECTURES",
    "DRN",
    "EMOS",
    "ConvGRUUNet",
    "LocalAffine",
    "TimeUNet",
    "UNet3d",
    "build_network",
    "is_sequence_arch",
]
