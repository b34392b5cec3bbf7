"""The generative task: any number of calibrated members with the weather's spatial structure.

:class:`GenerativeTask` maps the inputs of the mixed task (the K-member subset's mean and spread
at every input lead, the analysis at initialisation, location and static channels) plus random
noise to a member of the verifying analysis at the target lead(s); drawing new noise draws a new
member. Every member comes from the same network and its own noise, so members are exchangeable
and, given the inputs, independent: as many as wanted, any N.

A member is ``x = m_K + s · f(inputs, z)`` (m_K the subset mean at the target lead, s the mean
training spread of the field and level), then, with ``local_affine``, the per-point affine layer
on its standardised anomaly, and last the variable's physical lower bound (0 for precipitation
and wind speed, :func:`ensml.scores.distributions.natural_lower`) as ``max(x, 0)``, which puts a
point mass at zero where members are dry.

``f`` is a shared trunk and a member head. The trunk, the main U-Net (``width``, ``depth``), reads
the inputs once per forecast and gives ``trunk_channels`` features at every grid point; the head
reads the features and a member's noise ``z``. Drawing N members costs one trunk pass and N head
passes. The default head is a small network of each grid point (``head_kernel: 1``,
``head_depth: 0``: two 1 × 1 × 1 convolutions of ``head_width`` channels), under a tenth of a
trunk pass per member at 361 × 720 (where it is bound by memory traffic), so that 50 members cost
about five passes, not 50; a head with a larger kernel or depth (a small U-Net) shapes the noise
itself, at about a third of a trunk pass per member. The noise ``z`` is ``noise_channels``
standard normal channels at each of ``noise_scales``: drawn on a grid ``scale`` times coarser and
interpolated, so that the head has perturbations of several sizes to combine, from point-wise
ones to ones as large as a weather system; with the trunk's features setting how much of each,
where, the members get spatial structure that depends on the weather. The point-wise noise
passes through the default head as grid-scale grain (docs/guide/generative.md, the results).

Training draws ``train_members`` members per sample and minimises, in units of s,

``L = CRPS_f + es_weight · ES_f / √(p²) + vs_weight · VS_f / (n(n − 1))``,

the area-weighted fair CRPS of every point, the fair energy score of every ``patch × patch``
block of every field and level, and the fair variogram score (order 0.5) of ``vs_points`` grid
points drawn anew each step over the whole field (:mod:`ensml.scores.fair_samples`), each
divided so that it is per component or per pair. The CRPS alone would let members be calibrated
point by point with any spatial structure; the energy score over patches rewards the right joint
distribution nearby (Chen, Janke, Steinke & Lerch 2024, Ann. Appl. Stat. 18(1)), the variogram
score the right differences between points near and far (Scheuerer & Hamill 2015). The fair forms
matter: the plain ensemble scores of N members reward over-dispersion.

Sampling is deterministic for a seed outside training: a sample's noise comes from a generator
seeded by ``sample_seed`` and the sample's index, member after member, so that the first 10 of
50 members have the noise of a 10-member draw (and are its members, but for the last bit of
float32 rounding where the network runs on batches of another size). Training draws from
torch's global generator (``seed_everything`` makes runs repeat).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ensml.errors import EnsmlError
from ensml.models import build_network
from ensml.models.speed import CHANNELS_LAST, SpeedOptions, apply_speed
from ensml.scores.distributions import natural_lower
from ensml.scores.fair_samples import crps_fair, energy_score_fair, variogram_score_fair
from ensml.train.options import NonNegativeFloat, NonNegativeInt, PositiveInt
from ensml.train.task_base import EnsembleTask
from ensml.train.tasks import run_net

#: Grid points (members × samples × levels × latitudes × longitudes) drawn through the head at
#: once outside training: 16 members of one sample on ENS-10's 361 × 720 grid at 2 levels; on a
#: small grid all members go at once.
CHUNK_POINTS = 16 * 2 * 361 * 720

#: Order of the variogram score in the loss (as ``ensml evaluate --multivariate`` scores it).
VS_ORDER = 0.5

#: Smoothing of ``|d|^p`` at 0 in the loss's variogram score, in units of s: the score moves by at
#: most 0.01 s^0.5 per point pair and its gradient stays finite where two points are equal (dry)
#: in every member (:func:`~ensml.scores.fair_samples.variogram_score_fair`).
VS_SMOOTH = 1e-4


class GenerativeTask(EnsembleTask):
    """Members of the verifying analysis at the target lead(s) from K members and noise (see the
    module).

    Parameters
    ----------
    use_analysis
        Feed the analysis at initialisation to the network, as the mixed task does.
    trunk_channels
        Features the trunk gives the head at every grid point.
    head_width, head_depth, head_kernel
        The member head, a U-Net: channels of its first level, its poolings (0: two convolutions
        at full resolution), and its odd kernel size (1: each grid point on its own). Its cost per
        member grows with all three.
    noise_channels
        Standard normal channels at each noise scale.
    noise_scales
        Coarsening factors of the noise grids (1: a value per grid point); each adds
        ``noise_channels`` channels, drawn on a grid that many times coarser in latitude and
        longitude and interpolated to the grid.
    train_members
        Members drawn per sample in training (at least 2: the fair scores need two).
    es_weight
        Weight of the patch energy score in the loss (0: the fair CRPS alone).
    patch
        Side of the square blocks (grid points) the energy score is taken over; a grid smaller
        than that is one block along that side. Training places the blocks at a random offset,
        so that every pair of neighbours is scored together now and then.
    vs_weight
        Weight of the variogram score in the loss (0: none).
    vs_points
        Grid points of each field and level the variogram score takes, drawn anew each training
        step (validation: the same points each time); its cost grows with their square.
    n_members
        Members drawn per sample by ``predict`` (any number; not a weight: a checkpoint is applied
        with any).
    sample_seed
        Seed of the noise outside training (``predict``, validation).
    **kwargs
        As :class:`~ensml.train.task_base.EnsembleTask`.
    """

    quality_name = "crps"
    trains_on_analysis = True

    def __init__(
        self,
        *args: Any,
        use_analysis: bool = True,
        trunk_channels: PositiveInt = 16,
        head_width: PositiveInt = 16,
        head_depth: NonNegativeInt = 0,
        head_kernel: PositiveInt = 1,
        noise_channels: PositiveInt = 4,
        noise_scales: list[PositiveInt] = (1, 4, 16),  # type: ignore[assignment]
        train_members: PositiveInt = 4,
        es_weight: NonNegativeFloat = 1.0,
        patch: PositiveInt = 8,
        vs_weight: NonNegativeFloat = 1.0,
        vs_points: PositiveInt = 128,
        n_members: PositiveInt = 10,
        sample_seed: NonNegativeInt = 0,
        **kwargs: Any,
    ) -> None:
        if train_members < 2:
            raise EnsmlError(
                f"GenerativeTask train_members must be at least 2 (the fair scores compare members), "
                f"got {train_members}"
            )
        if not noise_scales:
            raise EnsmlError("GenerativeTask noise_scales must name at least one scale, e.g. [1, 8]")
        if any(int(s) < 1 for s in noise_scales):
            raise EnsmlError(f"GenerativeTask noise_scales must be positive, got {list(noise_scales)}")
        arch = kwargs.get("arch", "unet3d")
        if arch != "unet3d":
            raise EnsmlError(
                f"GenerativeTask's trunk is the unet3d network (a temporal trunk is not built), "
                f"got arch {arch!r}"
            )
        if vs_points < 2:
            raise EnsmlError(
                f"GenerativeTask vs_points must be at least 2 (the score compares points), got {vs_points}"
            )
        if head_kernel % 2 == 0:
            raise EnsmlError(f"GenerativeTask head_kernel must be odd (a centred kernel), got {head_kernel}")
        groups = int(kwargs.get("norm_groups", 0))
        if groups and head_width % groups:
            raise EnsmlError(
                f"GenerativeTask head_width={head_width} must be a multiple of norm_groups={groups}: "
                "the head's blocks are normalised in norm_groups groups of equal size"
            )
        super().__init__(*args, **kwargs)
        hp = self.hparams
        head = build_network(
            "unet3d",
            int(hp.trunk_channels) + self.n_noise,
            self.n_fields,
            width=int(hp.head_width),
            depth=int(hp.head_depth),
            kernel_size=int(hp.head_kernel),
            norm_groups=hp.norm_groups,
        )
        # channels innermost: the head's convolutions are point-wise matrix products, which
        # oneDNN runs 2-3 times faster in that layout on the CPU (benchmarks/generative.py)
        self.head = apply_speed(self.prepare_net(head), SpeedOptions(channels_last=True))
        variables = list(self.hparams.variables)
        # (V,) lower bound of each variable (−inf: none), applied to its members.
        bounds = [natural_lower(v) for v in variables]
        self.register_buffer(
            "lower", torch.tensor([-math.inf if b is None else b for b in bounds]), persistent=False
        )

    @property
    def uses_analysis(self) -> bool:
        return bool(self.hparams.get("use_analysis", True))

    @property
    def n_noise(self) -> int:
        """Noise channels of the network's input."""
        return int(self.hparams.noise_channels) * len(self.hparams.noise_scales)

    @property
    def net_channels(self) -> int:
        """The trunk's features (``trunk_channels``), which the head reads."""
        return int(self.hparams.trunk_channels)

    # -- noise --------------------------------------------------------------------------------
    def noise(
        self, n: int, shape: tuple[int, int, int], like: torch.Tensor, generator: torch.Generator | None
    ) -> torch.Tensor:
        """``n`` draws of the noise channels (n, C, D, H, W) on the grid ``shape`` = (D, H, W).

        A scale's coarse values are interpolated linearly: unit variance at the coarse points,
        smooth between. Along longitude they wrap around, as the network's convolutions do: a
        coarse point every ``scale`` grid points and the last interval closing onto the first, so
        that the noise has no seam at the grid's edge."""
        d, h, w = shape
        parts = []
        for scale in self.hparams.noise_scales:
            coarse = (d, max(1, math.ceil(h / scale)), max(1, math.ceil(w / scale)))
            z = torch.randn((n, self.hparams.noise_channels, *coarse), generator=generator)
            z = z.to(like)
            if coarse != shape:
                wrapped = torch.cat([z, z[..., :1]], dim=-1)  # the first column again, after the last
                size = (d, h, coarse[2] * scale + 1)
                z = F.interpolate(wrapped, size=size, mode="trilinear", align_corners=True)[..., :w]
            parts.append(z)
        return torch.cat(parts, dim=1)

    def noise_generators(self, batch: dict[str, torch.Tensor]) -> list[torch.Generator]:
        """One generator per sample, seeded by ``sample_seed`` and the sample's index: the stream
        its members' noise is drawn from, member after member."""
        seed = int(self.hparams.sample_seed)
        return [torch.Generator().manual_seed(seed * 1_000_003 + int(i)) for i in batch["index"].tolist()]

    def sample_noise(
        self, batch: dict[str, torch.Tensor], n: int, generators: list[torch.Generator] | None = None
    ) -> torch.Tensor:
        """Noise of ``n`` members of every sample (B, n, C, D, H, W): its first ``n``, the same for
        a sample's index and ``sample_seed`` whatever the batch; given ``generators``
        (:meth:`noise_generators`), the ``n`` after those they have drawn already."""
        shape = tuple(batch["mean_k"].shape[-3:])
        generators = self.noise_generators(batch) if generators is None else generators
        # member after member, so that a member's noise does not depend on how many are drawn
        draws = [[self.noise(1, shape, batch["mean_k"], g) for _ in range(n)] for g in generators]
        return torch.stack([torch.cat(member) for member in draws])

    # -- members ------------------------------------------------------------------------------
    def trunk(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The trunk's features (B, trunk_channels, D, H, W): once per forecast, for any members."""
        return run_net(self, self.net, self.features(batch))

    def members(
        self, batch: dict[str, torch.Tensor], noise: torch.Tensor, trunk: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The members (B, N, F, D, H, W) in physical units, one per noise draw (B, N, C, D, H, W),
        from the trunk's features (:meth:`trunk`, computed here unless given)."""
        b, n = noise.shape[:2]
        trunk = self.trunk(batch) if trunk is None else trunk
        c = trunk.shape[1]
        shape = (b * n, c + noise.shape[2], *trunk.shape[2:])
        # filled in place, in the head's layout (channels innermost)
        x = torch.empty(shape, dtype=trunk.dtype, device=trunk.device, memory_format=CHANNELS_LAST)
        x[:, :c] = trunk.repeat_interleave(n, 0)
        x[:, c:] = noise.flatten(0, 1)
        out = self.tie_surface(run_net(self, self.head, x))  # (B·N, F, D, H, W)
        centre = self.at_targets(batch["mean_k"]).repeat_interleave(n, 0)
        x = centre + self.scale() * out
        if self.local is not None:
            clim, anom_std = self.field_clim()
            x = clim + anom_std * self.affine((x - clim) / anom_std, 0)
        lower = self.lower.repeat(len(self.target_leads))[None, :, None, None, None]
        x = torch.maximum(x, lower.to(x))
        return x.unflatten(0, (b, n))

    def draw(self, batch: dict[str, torch.Tensor], n: int | None = None) -> torch.Tensor:
        """``n`` members (default ``n_members``) of every sample (B, N, F, D, H, W), reproducibly
        (:meth:`sample_noise`): one trunk pass, then the head on chunks of at most
        :data:`CHUNK_POINTS` grid points."""
        n = int(self.hparams.n_members) if n is None else n
        chunk = max(1, CHUNK_POINTS // batch["mean_k"][:, 0, 0].numel())  # members per pass
        trunk, generators = self.trunk(batch), self.noise_generators(batch)
        chunks = []
        for first in range(0, n, chunk):  # each chunk's noise continues the streams of the last
            size = min(chunk, n - first)
            chunks.append(self.members(batch, self.sample_noise(batch, size, generators), trunk))
        return torch.cat(chunks, dim=1)

    def _training_members(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``train_members`` members: drawn from the global generator in training, else the
        reproducible draw, which validation and testing make once per batch (``batch["members"]``)
        for the loss, the quality and the scores alike."""
        n = int(self.hparams.train_members)
        if self.training and torch.is_grad_enabled():
            b, shape = batch["mean_k"].shape[0], tuple(batch["mean_k"].shape[-3:])
            return self.members(batch, self.noise(b * n, shape, batch["mean_k"], None).unflatten(0, (b, n)))
        return batch["members"] if "members" in batch else self.draw(batch, n)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        super().validation_step(self._with_members(batch), batch_idx)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        super().test_step(self._with_members(batch), batch_idx)

    def _with_members(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**batch, "members": self.draw(batch, int(self.hparams.train_members))}

    # -- scores -------------------------------------------------------------------------------
    def _patch_energy(self, members: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Mean fair energy score of ``patch × patch`` blocks over every field and level, per
        component (÷ √(p²)), blocks weighted by their mean latitude weight."""
        h, w = obs.shape[-2:]
        ph, pw = min(int(self.hparams.patch), h), min(int(self.hparams.patch), w)
        oh, ow = (0, 0)
        if self.training:  # a random offset, so that block edges move
            oh, ow = (int(torch.randint(0, s, ()).item()) for s in (h % ph + 1, w % pw + 1))
        nh, nw = h // ph, w // pw

        def blocks(x: torch.Tensor) -> torch.Tensor:  # (…, H, W) → (…, nh, nw, ph·pw)
            x = x[..., oh : oh + nh * ph, ow : ow + nw * pw]
            x = x.unflatten(-1, (nw, pw)).unflatten(-3, (nh, ph))  # (…, nh, ph, nw, pw)
            return x.transpose(-3, -2).flatten(-2)

        es = energy_score_fair(blocks(members), blocks(obs), member_dim=1)  # (B, F, D, nh, nw)
        weights = self.lat_weights[oh : oh + nh * ph].unflatten(0, (nh, ph)).mean(1)[:, None]
        weighted = es * weights / math.sqrt(ph * pw)
        return weighted.mean() if self.reduce_mean is None else self.reduce_mean(weighted)

    def _variogram(self, members: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Mean fair variogram score over every field and level of ``vs_points`` grid points, per
        ordered pair; the points are drawn anew each training step, the same ones otherwise."""
        points = obs.shape[-2] * obs.shape[-1]
        n = min(int(self.hparams.vs_points), points)
        generator = None if self.training else torch.Generator().manual_seed(int(self.hparams.sample_seed))
        chosen = torch.randperm(points, generator=generator)[:n].to(obs.device)
        x, y = members.flatten(-2)[..., chosen], obs.flatten(-2)[..., chosen]
        vs = variogram_score_fair(x, y, member_dim=1, p=VS_ORDER, smooth=VS_SMOOTH) / (n * (n - 1))
        return vs.mean() if self.reduce_mean is None else self.reduce_mean(vs)

    def _losses(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The area-weighted fair CRPS, patch energy score and variogram score, in units of s;
        the scores of weight 0 are not computed."""
        s = self.scale()
        members, obs = self._training_members(batch) / s[:, None], batch["obs"] / s
        terms = {"crps": self.area_mean(crps_fair(members, obs, dim=1))}
        if float(self.hparams.es_weight):
            terms["es"] = float(self.hparams.es_weight) * self._patch_energy(members, obs)
        if float(self.hparams.vs_weight):
            terms["vs"] = float(self.hparams.vs_weight) * self._variogram(members, obs)
        return terms

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(self._losses(batch).values())  # type: ignore[return-value]

    def quality(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Area-weighted fair CRPS of ``train_members`` members, in units of s."""
        s = self.scale()
        members = self._training_members(batch) / s[:, None]
        return self.area_mean(crps_fair(members, batch["obs"] / s, dim=1))

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"crps": crps_fair(self._training_members(batch), batch["obs"], dim=1)}

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        """``{"index": …, "members": (B, N, F, D, H, W)}``: ``n_members`` members of each sample."""
        return {"index": batch["index"], "members": self.draw(batch)}


__all__ = ["CHUNK_POINTS", "GenerativeTask"]
