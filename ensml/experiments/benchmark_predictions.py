"""The benchmark's predictions: every model's test-split output, per variable, in its family.

A prediction is a dict that every source of the table fills alike (networks, EMOS, the
per-point bounds):

- ``kind``: ``"mixed"`` (a predictive distribution) or ``"spread"`` (a spread estimate);
- ``index`` (N,): the samples of the test split it predicts;
- ``families`` ``{var: Family}`` (mixed only): each variable's predictive family
  (:mod:`ensml.scores.distributions`);
- ``{var}_{param}`` (N, T, D, H, W) arrays: the family's parameters of each variable at the T
  target leads (``z_mean``, ``z_std``, ``tp_shape``, …; a spread estimate's ``{var}_std``), as
  :meth:`ensml.train.tasks.MixedTask.predict_step` returns them. A surface variable's D levels
  hold one field (the tasks tie them, EMOS fits them alike).

A prediction may cover some of the variables only (the per-point bounds: z and t); the table
then has its rows for those. A model's row label says its family once for all its variables
(:func:`model_label`): ``local EMOS (Gaussian)`` when every variable is normal (the names of
the Gaussian benchmark), ``U-Net (csg0+truncnormal)`` otherwise; the ``estimator`` column says
each row's family.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ensml.scores.distributions import Family, family_for

#: The family label of a model whose variables are all normal.
GAUSSIAN = "Gaussian"


def family_label(families: Iterable[Family | str]) -> str:
    """``Gaussian`` when every family is normal, else the other families' names joined by ``+``
    in order (``csg0+truncnormal``; the normal ones of z and t left out)."""
    names = [f if isinstance(f, str) else f.name for f in families]
    others = list(dict.fromkeys(n for n in names if n != "normal"))
    return "+".join(others) if others else GAUSSIAN


def model_label(name: str, families: Iterable[Family | str]) -> str:
    """A distribution source's row label: ``name (family label)``."""
    return f"{name} ({family_label(families)})"


def from_fields(
    index: np.ndarray,
    fields: Mapping[str, np.ndarray],
    variables: Sequence[str],
    families: Sequence[Family] | None = None,
) -> dict:
    """A prediction from lead-major fields ``fields[param]`` (N, T·V, D, H, W) of ``variables``.

    With ``families`` (one per variable, whose parameters ``fields`` holds): a mixed prediction;
    without: a spread estimate (``fields`` holds ``std``).
    """
    n, v = len(index), len(variables)
    out: dict = {"kind": "spread" if families is None else "mixed", "index": np.asarray(index)}
    if families is not None:
        out["families"] = dict(zip(variables, families, strict=True))
    for param, value in fields.items():
        by_var = np.asarray(value).reshape(n, -1, v, *value.shape[2:])  # (N, T, V, D, H, W)
        out.update({f"{var}_{param}": by_var[:, :, i] for i, var in enumerate(variables)})
    return out


def gaussian(index: np.ndarray, mean: np.ndarray, std: np.ndarray, variables: Sequence[str]) -> dict:
    """A Gaussian prediction of every variable from lead-major ``mean``/``std`` fields."""
    families = [family_for(var, "normal") for var in variables]
    return from_fields(index, {"mean": mean, "std": std}, variables, families)


def from_task(task: object, pred: dict[str, np.ndarray]) -> dict:
    """A trained task's :meth:`predict_step` outputs, concatenated over the test split, as a
    prediction: a mixed task's per-variable parameters with its families, a spread task's
    lead-major ``std`` fields split by variable."""
    variables = list(task.hparams.variables)  # type: ignore[attr-defined]
    families = getattr(task, "families", None)
    if families is None:
        return from_fields(pred["index"], {"std": pred["std"]}, variables)
    out = {"kind": "mixed", "index": pred["index"], "families": dict(zip(variables, families, strict=True))}
    return out | {key: value for key, value in pred.items() if key != "index"}


def variables_of(prediction: Mapping) -> list[str]:
    """The variables a prediction holds."""
    if prediction["kind"] == "mixed":
        return list(prediction["families"])
    return [key[: -len("_std")] for key in prediction if key.endswith("_std")]


__all__ = ["GAUSSIAN", "family_label", "from_fields", "from_task", "gaussian", "model_label", "variables_of"]
