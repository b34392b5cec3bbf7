"""Plain ``nn.Module`` networks. No Lightning here."""

from __future__ import annotations

from torch import nn

from ensml.errors import EnsmlError
from ensml.models.unet3d import UNet3d

ARCHITECTURES: dict[str, type[nn.Module]] = {"unet3d": UNet3d}


def build_network(arch: str, in_channels: int, out_channels: int, **kwargs) -> nn.Module:
    """Instantiate the network named ``arch`` (see :data:`ARCHITECTURES`)."""
    try:
        cls = ARCHITECTURES[arch]
    except KeyError:
        raise EnsmlError(f"unknown model arch {arch!r} (choose from: {', '.join(ARCHITECTURES)})") from None
    return cls(in_channels, out_channels, **kwargs)


__all__ = ["ARCHITECTURES", "UNet3d", "build_network"]
