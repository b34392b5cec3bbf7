"""The EMOS variants of ``ensml benchmark``: global or local coefficients, each variable in its family.

Each entry of the benchmark's ``emos`` option is a variant (:class:`~ensml.experiments.options.EmosSpec`;
the plain ``global``/``local`` are variants in every variable's default family: Gaussian for z
and t, as always, censored shifted gamma for ``tp``, truncated normal for ``si10``). A variant is
fitted on the training split's K-member mean and std at every target lead (each lead and
variable has its own coefficients), one fit per family: the fields of the variables that share
a family are fitted together (:func:`ensml.train.emos.fit_emos`), so a Gaussian EMOS of z and t
is the one fit it always was, to the last bit. A family of surface variables only (``tp``,
``si10``) is fitted on one of the D levels their samples repeat, and predicts all of them.

The skill columns against local EMOS refer to the *reference* (:func:`reference`): the local
variant in every variable's default family (right-family local EMOS), else the first local one.
Its validation CRPS, in the tasks' normalised units, is also the baseline of the mixed models'
time to quality.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import lightning as L
import numpy as np
import torch

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.experiments.benchmark_predictions import model_label
from ensml.experiments.options import EmosSpec
from ensml.models.emos import EMOS
from ensml.names import default_family, family_names
from ensml.scores.distributions import Family, family_for
from ensml.scores.gaussian import crps_gaussian
from ensml.train.emos import emos_distribution, fit_emos

#: The table name of a variant by mode, before its family.
EMOS_NAMES = {"global": "global EMOS", "local": "local EMOS"}


@dataclass(frozen=True)
class EmosVariant:
    """One EMOS of the table: its mode, each variable's family and its row label."""

    mode: str
    variables: tuple[str, ...]
    families: tuple[Family, ...]
    label: str

    @property
    def right_family(self) -> bool:
        """Whether every variable has its default family."""
        return all(f.name == default_family(v) for v, f in zip(self.variables, self.families))


def variants(emos: Sequence[str | EmosSpec | Mapping], variables: Sequence[str]) -> list[EmosVariant]:
    """The variants of the ``emos`` option (``global``, ``local`` or :class:`EmosSpec`)."""
    out = []
    for i, item in enumerate(emos):
        spec = _spec(item, i)
        if spec.mode not in EMOS_NAMES:
            raise EnsmlError(f"benchmark emos[{i}]: mode must be 'global' or 'local', got {spec.mode!r}")
        names = family_names(variables, spec.distribution, f"benchmark emos[{i}].distribution")
        families = tuple(family_for(v, n) for v, n in zip(variables, names))
        bqn = [v for v, f in zip(variables, families) if f.name.startswith("bqn")]
        if bqn:
            raise EnsmlError(
                f"benchmark emos[{i}].distribution: EMOS fits parametric families, {bqn[0]} is bqn "
                "(a quantile network is a mixed model)"
            )
        label = model_label(spec.name or EMOS_NAMES[spec.mode], families)
        out.append(EmosVariant(spec.mode, tuple(variables), families, label))
    return out


def _spec(item: str | EmosSpec | Mapping | object, i: int) -> EmosSpec:
    if isinstance(item, EmosSpec):
        return item
    if isinstance(item, str):
        return EmosSpec(mode=item)  # type: ignore[arg-type]
    values = dict(item) if isinstance(item, Mapping) else dict(vars(item))
    try:
        return EmosSpec(**values)
    except TypeError as exc:
        raise EnsmlError(f"benchmark emos[{i}]: {exc} (keys: mode, distribution, name)") from None


def reference(found: Sequence[EmosVariant], variables: Sequence[str]) -> EmosVariant:
    """The local EMOS the skill columns refer to: the right-family one, else the first local one,
    else a right-family local EMOS fitted for the baseline only (not in the table)."""
    local = [v for v in found if v.mode == "local"]
    right = [v for v in local if v.right_family]
    if right or local:
        return (right or local)[0]
    return variants(["local"], variables)[0]


def _at_targets(x: torch.Tensor, indices: list[int]) -> torch.Tensor:
    """(B, V, L, D, H, W) → (B, T·V, D, H, W) at the target leads, lead-major (as the tasks)."""
    return x[:, :, indices].transpose(1, 2).flatten(1, 2)


def collect(loader, indices: list[int]) -> dict[str, torch.Tensor]:
    """K-member mean and std, analysis, M-member std and sample index of every batch of ``loader``
    at the target leads (``indices`` among the input leads)."""
    parts: dict[str, list] = {"mean": [], "std": [], "obs": [], "std_m": [], "index": []}
    for b in loader:
        parts["mean"].append(_at_targets(b["mean_k"], indices))
        parts["std"].append(_at_targets(b["std_k"], indices))
        for key in ("obs", "std_m", "index"):
            parts[key].append(b[key])
    return {k: torch.cat(v) for k, v in parts.items()}


@dataclass(frozen=True)
class Group:
    """The fields of the variables that share a family, fitted as one EMOS."""

    variables: list[int]  # indices into the benchmark's variables
    fields: slice | list[int]  # their fields among the T·V lead-major ones
    family: Family
    surface: bool = False  # surface variables only: fitted on one of their D equal levels
    model: EMOS | None = None

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """``x``'s (B, F, D, H, W) fields of this group (one level of surface fields)."""
        x = x[:, self.fields]
        return x[:, :, :1] if self.surface else x


def groups(variant: EmosVariant, n_leads: int, surface: Sequence[bool]) -> list[Group]:
    """One group per family of ``variant``, its variables in order (all fields at once when one
    family covers every variable: the fit of the Gaussian benchmark); ``surface``: which
    variables are surface ones (their D levels repeat one field)."""
    n_var = len(variant.families)
    by_name: dict[str, list[int]] = {}
    for v, family in enumerate(variant.families):
        by_name.setdefault(family.name, []).append(v)
    out = []
    for vs in by_name.values():
        fields = [t * n_var + v for t in range(n_leads) for v in vs]
        whole = fields == list(range(n_leads * n_var))
        flat = all(surface[v] for v in vs)
        out.append(Group(vs, slice(None) if whole else fields, variant.families[vs[0]], flat))
    return out


def fit(
    variant: EmosVariant,
    data: dict[str, torch.Tensor],
    weights: torch.Tensor,
    n_leads: int,
    surface: Sequence[bool],
) -> list[Group]:
    """Every group of ``variant`` fitted on ``data`` (:func:`collect`'s)."""
    fitted = []
    for g in groups(variant, n_leads, surface):
        inputs = (g.take(data["mean"]), g.take(data["std"]), g.take(data["obs"]))
        model = fit_emos(*inputs, mode=variant.mode, weights=weights, family=g.family)  # type: ignore[arg-type]
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:  # one point's non-finite step makes every coefficient of a joint L-BFGS fit NaN
            names = ", ".join(variant.variables[v] for v in g.variables)
            raise EnsmlError(
                f"benchmark: {variant.label} of {names} ({g.family.name}) diverged: its fitted "
                f"coefficients {', '.join(bad)} are not finite"
            )
        fitted.append(replace(g, model=model))
    return fitted


def predict(
    fitted: list[Group], data: dict[str, torch.Tensor], variables: Sequence[str], n_leads: int
) -> dict:
    """The prediction (:mod:`ensml.experiments.benchmark_predictions`) of the fitted groups."""
    n = len(data["index"])
    out: dict = {"kind": "mixed", "index": data["index"].numpy(), "families": {}}
    for g in fitted:
        assert g.model is not None
        mean = g.take(data["mean"])
        params = emos_distribution(g.model, g.family, mean, g.take(data["std"]))
        names = [variables[v] for v in g.variables]
        for name in names:
            out["families"][name] = g.family
        shape = (n, mean.shape[1], data["mean"].shape[2], *mean.shape[3:])  # every level
        for param, value in params.items():
            value = torch.broadcast_to(value, shape)  # global parameters, surface fields' one level
            by_var = value.reshape(n, n_leads, len(names), *value.shape[2:])  # (N, T, V_g, D, H, W)
            out.update({f"{name}_{param}": by_var[:, :, i].numpy() for i, name in enumerate(names)})
    out["families"] = {v: out["families"][v] for v in variables}  # the variables' order
    return out


def val_crps(
    fitted: list[Group], data: dict[str, torch.Tensor], scale: torch.Tensor, w: torch.Tensor
) -> float:
    """The area-weighted mean CRPS of the fitted groups on ``data``, every field scaled by its
    spread ``scale`` (1, F, D, 1, 1): a mixed task's ``val/loss``."""
    crps = torch.empty_like(data["obs"])
    for g in fitted:
        assert g.model is not None
        mean, std, obs, s = (g.take(x) for x in (data["mean"], data["std"], data["obs"], scale))
        if g.family.name == "normal":
            mu, sigma = g.model(mean, std)
            part = crps_gaussian(mu / s, sigma / s, obs / s, check=False)
        else:
            part = g.family.crps(emos_distribution(g.model, g.family, mean, std), obs) / s
        crps[:, g.fields] = part  # a surface group's one level on every level
    return float((crps * w).mean())


def fit_all(
    dm: EnsembleDataModule, found: Sequence[EmosVariant], seed: int
) -> tuple[dict[str, dict], dict[str, dict], dict[str, float], dict[str, torch.Tensor]]:
    """Fit every variant on the training split's K-member mean/std; predict the test split.

    Returns the predictions and information (``params``, ``train_s``) by row label; the
    validation baselines of time to quality, in the tasks' normalised ``val/loss`` units: the
    reference's CRPS (``mixed``; :func:`reference`) and the K-member sample std's squared error
    against the M-member spread (``spread``); and the test split's inputs (:func:`collect`).
    """
    spec = dm.spec
    indices, variables, n_leads = spec.target_indices, list(spec.variables), len(spec.target_indices)
    L.seed_everything(seed, verbose=False)
    loaders = (dm.train_dataloader, dm.val_dataloader, dm.predict_dataloader)
    train, val, test = (collect(loader(), indices) for loader in loaders)
    # the one area weighting (cell areas, mean 1): of the fits' objective and of the baselines
    weights = torch.as_tensor(latitude_weights(dm.coords["latitude"]).values, dtype=torch.float32)
    surface = [bool(x) for x in np.asarray(dm.stats.get("surface", np.zeros(len(variables))))]
    ref = reference(found, variables)
    preds, info, ref_fit = {}, {}, None
    for variant in [*found, *([] if ref in found else [ref])]:
        start = time.perf_counter()
        fitted = fit(variant, train, weights, n_leads, surface)
        took = time.perf_counter() - start
        if variant is ref:
            ref_fit = fitted
        if variant not in found:
            continue
        preds[variant.label] = predict(fitted, test, variables, n_leads)
        n_params = sum(p.numel() for g in fitted for p in g.model.parameters())  # type: ignore[union-attr]
        info[variant.label] = {"params": n_params, "train_s": took}
    assert ref_fit is not None
    # The tasks' val/loss: area-weighted (cell area, mean 1) means of fields scaled by the spread.
    scale = torch.as_tensor(dm.stats["target_scale"]).flatten(0, 1)[None, :, :, None, None]
    w = weights[:, None]
    baselines = {
        "mixed": val_crps(ref_fit, val, scale, w),
        "spread": float((((val["std"] - val["std_m"]) / scale) ** 2 * w).mean()),
    }
    return preds, info, baselines, test


__all__ = [
    "EMOS_NAMES",
    "EmosVariant",
    "Group",
    "collect",
    "fit",
    "fit_all",
    "groups",
    "predict",
    "reference",
    "val_crps",
    "variants",
]
