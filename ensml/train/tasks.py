"""LightningModules: spread estimation and mixed prediction + post-processing.

Both build on :class:`~ensml.train.task_base.EnsembleTask` (inputs, normalisation, target leads,
static inputs, the per-point affine layer, the loop). Shapes: ``F = T × V`` output fields (target
leads × variables, lead-major), ``D`` levels, ``H × W`` grid.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import torch
import torch.nn.functional as F

from ensml.errors import EnsmlError
from ensml.models.speed import SpeedOptions, apply_speed, autocast, to_layout
from ensml.names import family_names, family_params
from ensml.scores.distributions import Family, family_for
from ensml.scores.gaussian import crps_gaussian
from ensml.train.hparams import DATA_KEYS, GRID_KEY, check_compatible
from ensml.train.msssim import ms_ssim
from ensml.train.task_base import DATA_BUFFERS, STAT_KEYS, EnsembleTask, inverse_softplus

#: Weights of the research's spread loss, ``0.16·L1 + 0.84·(1 − MS-SSIM)`` (Grönquist et al. 2021).
L1_WEIGHT, MSSSIM_WEIGHT = 0.16, 0.84


def network(
    task: EnsembleTask, batch: dict[str, torch.Tensor], net: torch.nn.Module | None = None
) -> torch.Tensor:
    """``net`` (default: the task's network) on the batch's features, surface fields tied.

    Here rather than a method of :class:`EnsembleTask`: a prediction then crosses this module
    and the network only (see docs/architecture.md, the spines).
    """
    return task.tie_surface(run_net(task, net or task.net, task.features(batch)))


def run_net(task: EnsembleTask, net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``net`` on the input ``x`` (float32 out), as the task runs its networks.

    A training step runs as the task's speed options say (compiled, under bf16 autocast, in the
    channels-last layout); validation and prediction run the plain float32 network.
    """
    speed = task.speed
    if not (task.training and torch.is_grad_enabled()):
        return net(to_layout(x, speed))
    if speed.compile:
        if id(net) not in task.compiled:
            task.compiled[id(net)] = apply_speed(net, SpeedOptions(compile=True))
        net = task.compiled[id(net)]
    with autocast(speed, x.device.type):
        return net(to_layout(x, speed)).float()


class SpreadTask(EnsembleTask):
    """Predict the M-member spread (std, ddof 0) at the target lead(s) from K members.

    Output: σ̂ = s · softplus(f(x) + softplus⁻¹(s_K / s)), with s the mean training spread of the
    field and level and s_K the K-member std, so an untrained network starts at the K-member
    std; with ``local_affine``, log(σ̂ / s) then passes the per-point affine layer.

    Parameters
    ----------
    loss
        ``mse``: area-weighted mean squared error of σ̂ / s against σ_M / s (every variable and
        level counts alike; the loss matches the RMSE reported by ``ensml evaluate``).
        ``l1_msssim``: the research's 0.16·L1 + 0.84·(1 − MS-SSIM) of σ̂ / s against σ_M / s,
        MS-SSIM over latitude × longitude with periodic longitude (:mod:`ensml.train.msssim`).
    **kwargs
        As :class:`~ensml.train.task_base.EnsembleTask`.
    """

    quality_name = "spread_mse"

    def __init__(self, *args: Any, loss: Literal["mse", "l1_msssim"] = "mse", **kwargs: Any) -> None:
        if loss not in ("mse", "l1_msssim"):
            raise EnsmlError(f"SpreadTask loss must be 'mse' or 'l1_msssim', got {loss!r}")
        super().__init__(*args, **kwargs)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        s = self.scale()
        sigma = s * F.softplus(network(self, batch) + inverse_softplus(self.prior_std(batch) / s))
        if self.local is not None:
            sigma = s * torch.exp(self.affine(torch.log(sigma / s), 0))
        return sigma

    def quality(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Area-weighted mean squared error of σ̂ / s (the ``mse`` loss, whichever loss trains)."""
        s = self.scale()
        return self.area_mean(((self(batch) - batch["std_m"]) / s) ** 2)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.hparams.get("loss", "mse") == "mse":
            return self.quality(batch)
        s = self.scale()
        pred, target = self(batch) / s, batch["std_m"] / s
        l1 = self.area_mean((pred - target).abs())
        images = pred.flatten(0, 2)[:, None], target.flatten(0, 2)[:, None]  # (B·F·D, 1, H, W)
        rng = (target.amax() - target.amin()).detach().clamp_min(1e-6)
        return L1_WEIGHT * l1 + MSSSIM_WEIGHT * (
            1.0 - ms_ssim(*images, data_range=rng, weights=self.lat_weights)
        )

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"spread_sqerr": (self(batch) - batch["std_m"]) ** 2}

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"index": batch["index"], "std": self(batch)}


class MixedTask(EnsembleTask):
    """Predict a distribution of the verifying analysis at the target lead(s) from K members.

    The network gives, per output field, a location and a spread (and, for some families, more):
    μ = m_K + s · f_μ(x), σ = s · softplus(f_σ(x) + softplus⁻¹(s_K / s)), with m_K, s_K the subset
    mean and std and s the mean training spread; with ``local_affine``, the standardised μ and
    log(σ / s) then pass the per-point affine layer (the research's locally connected layer).
    Each variable's family (``distribution``) turns them into its parameters
    (:meth:`~ensml.scores.distributions.Family.from_moments`): N(μ, σ²) for z and t, a normal
    truncated at 0 for wind speed, a censored shifted gamma for precipitation (a third output,
    the shift), …; a Bernstein quantile network (``bqn``) takes d + 1 outputs per field as the
    coefficients of its quantile function instead. The loss is the family's closed-form CRPS
    (the mean pinball loss over quantile levels for ``bqn``), in units of s. The inputs also hold
    the analysis at initialisation unless ``use_analysis`` is false.

    Parameters
    ----------
    use_analysis
        Feed the analysis at initialisation to the network (the research's stage-1 input).
        Without it the model needs only the forecast, at a cost in skill that the README
        measures on the embedded data.
    scheme
        ``joint``: one network predicts every parameter, trained on the family's CRPS.
        ``two_stage``: the research's form (normal family only), two networks trained side by
        side: stage 1 predicts μ (a residual on the subset mean) with the mean squared error,
        stage 2 predicts σ with the Gaussian CRPS around stage 1's μ, which it does not move.
    distribution
        The family of each variable, e.g. ``{tp: csg0, si10: truncnormal}``; a variable not
        named takes its default (:data:`ensml.names.DEFAULT_FAMILIES`: ``tp`` csg0, ``si10``
        truncnormal, the rest normal). Families: ``normal``, ``truncnormal``, ``trunclogistic``,
        ``cnormal``, ``clogistic``, ``csg0``, ``bqn`` (or ``bqn:<degree>``).
    **kwargs
        As :class:`~ensml.train.task_base.EnsembleTask`.
    """

    quality_name = "crps"
    trains_on_analysis = True

    def __init__(
        self,
        *args: Any,
        use_analysis: bool = True,
        scheme: Literal["joint", "two_stage"] = "joint",
        distribution: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        if scheme not in ("joint", "two_stage"):
            raise EnsmlError(f"MixedTask scheme must be 'joint' or 'two_stage', got {scheme!r}")
        variables = list(kwargs.get("variables", args[0] if args else ("z", "t")))
        #: The family of each variable, checked and canonical (a fact of names; the Family objects
        #: are :attr:`families`).
        self.family_names = family_names(variables, distribution)
        # Outputs per field: the most any family needs (2 for location-scale families).
        self.n_outputs_per_var = max(len(family_params(name)) for name in self.family_names)
        if scheme == "two_stage" and self.n_outputs_per_var != 2:
            chosen = ", ".join(f"{v}: {f}" for v, f in zip(variables, self.family_names))
            raise EnsmlError(
                "MixedTask scheme two_stage trains a location and a spread network: it needs "
                f"location-scale families, got {chosen}"
            )
        super().__init__(*args, **kwargs)
        if scheme == "two_stage":
            self.net = self.build_net(self.n_fields)
            self.net_sigma = self.build_net(self.n_fields)

    @property
    def uses_analysis(self) -> bool:
        return bool(self.hparams.get("use_analysis", True))

    @property
    def two_stage(self) -> bool:
        return self.hparams.get("scheme", "joint") == "two_stage"

    @functools.cached_property
    def families(self) -> tuple[Family, ...]:
        """The predictive family of each variable (:mod:`ensml.scores.distributions`)."""
        return tuple(family_for(v, name) for v, name in zip(self.hparams.variables, self.family_names))

    def check_data(self, data: Any) -> None:
        """Refuse a family bounded at 0 for a variable whose training forecasts go below 0.

        ``data`` is the data module (its training statistics hold each variable's minimum).
        """
        minimum = data.stats.get("minimum")
        if minimum is None:
            return
        for var, family, low in zip(self.hparams.variables, self.families, minimum, strict=True):
            if family.lower is not None and float(low) < family.lower:
                raise EnsmlError(
                    f"model.distribution.{var}: {family.name} is bounded below at {family.lower:g}, "
                    f"but the training forecasts of {var} reach {float(low):.6g}; choose a family "
                    "without a bound (normal, or bqn for a variable ensml does not know to be positive)"
                )

    @property
    def all_normal(self) -> bool:
        return all(name == "normal" for name in self.family_names)

    def _outputs(self, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """The network's outputs, one (B, F, D, H, W) tensor per part (location, spread, …)."""
        if self.two_stage:
            return [network(self, batch), network(self, batch, self.net_sigma)]
        out, n = network(self, batch), self.n_fields
        return [out[:, j * n : (j + 1) * n] for j in range(self.n_outputs_per_var)]

    def _moments(self, batch: dict[str, torch.Tensor], raw: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Location μ and spread σ (B, F, D, H, W) in physical units, after the per-point layer."""
        s = self.scale()
        mu = self.at_targets(batch["mean_k"]) + s * raw[0]
        sigma = s * F.softplus(raw[1] + inverse_softplus(self.prior_std(batch) / s))
        if self.local is not None:
            clim, anom_std = self.field_clim()
            mu = clim + anom_std * self.affine((mu - clim) / anom_std, 0)
            sigma = s * torch.exp(self.affine(torch.log(sigma / s), 1))
        return mu, sigma

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The location μ and spread σ of every output field (B, F, D, H, W): for the normal
        family its mean and std."""
        return self._moments(batch, self._outputs(batch))

    def distributions(self, batch: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
        """Each variable's family parameters, ``{var: {param: (B, T, D, H, W)}}`` (T target leads)."""
        raw = self._outputs(batch)
        mu, sigma = self._moments(batch, raw)
        s, n_var = self.scale(), len(self.families)
        out = {}
        for v, (var, family) in enumerate(zip(self.hparams.variables, self.families)):
            at = slice(v, None, n_var)  # the variable's fields, one per target lead (lead-major)
            unit = s[:, at]
            if family.name.startswith("bqn"):
                parts = [self.affine(r, j)[:, at] for j, r in enumerate(raw)][: family.n_raw]
                centre = self.at_targets(batch["mean_k"])[:, at]
                out[var] = family.link(parts, centre, self.prior_std(batch)[:, at], unit)
            else:
                extra = self.affine(raw[2], 2)[:, at] if family.n_raw > 2 else None
                out[var] = family.from_moments(mu[:, at], sigma[:, at], extra, unit)
        return out

    def _crps_fields(self, batch: dict[str, torch.Tensor], scaled: bool) -> torch.Tensor:
        """Each field's CRPS (B, F, D, H, W); in units of the spread scale s if ``scaled``."""
        s, obs, n_var = self.scale(), batch["obs"], len(self.families)
        if self.all_normal:  # the Gaussian's own path, float32, as before families existed
            mu, sigma = self(batch)
            if scaled:
                return crps_gaussian(mu / s, sigma / s, obs / s, check=False)
            return crps_gaussian(mu, sigma, obs, check=False)
        fields = torch.empty_like(obs)
        for v, params in enumerate(self.distributions(batch).values()):
            at = slice(v, None, n_var)
            crps = self.families[v].crps(params, obs[:, at])
            fields[:, at] = crps / s[:, at] if scaled else crps
        return fields

    def quality(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Area-weighted CRPS of the fields scaled by the spread (the joint loss)."""
        return self.area_mean(self._crps_fields(batch, scaled=True))

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if not self.two_stage:
            return self.quality(batch)
        mu, sigma = self(batch)
        s = self.scale()
        mse = self.area_mean(((mu - batch["obs"]) / s) ** 2)
        return mse + self.area_mean(crps_gaussian(mu.detach() / s, sigma / s, batch["obs"] / s, check=False))

    def scores(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"crps": self._crps_fields(batch, scaled=False)}

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        """``{"index": …, "<var>_<param>": (B, T, D, H, W), …}``: every variable's parameters."""
        out = {"index": batch["index"]}
        for var, params in self.distributions(batch).items():
            out |= {f"{var}_{p}": value for p, value in params.items()}
        return out


__all__ = [
    "DATA_BUFFERS",
    "DATA_KEYS",
    "GRID_KEY",
    "STAT_KEYS",
    "EnsembleTask",
    "MixedTask",
    "SpreadTask",
    "check_compatible",
    "inverse_softplus",
]
