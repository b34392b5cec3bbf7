"""Predictive families' closed-form CRPS: ensml against scoringrules, in one run.

For each family (normal, truncnormal, trunclogistic, cnormal, clogistic, csg0) on ``--n`` points
(default 1e6) of ordinary float64 forecasts and observations (a fifth of them exactly 0 for the
families bounded at 0), in interleaved rounds (so a burst of load hits all alike), one line per
comparison with the min and the median over ``--repeats`` and the ratio of the medians:

* numpy: :meth:`Family.crps` on numpy arrays (float64 torch kernels inside) against
  scoringrules' numpy backend, with the largest absolute difference between the two (the
  CRPS values are of order 1) where scoringrules is usable (finite, and for a truncated
  family its location above −3 scales, below which its forms cancel);
* torch forward, and forward+backward (gradients in every parameter and y): the same on
  tensors against scoringrules' torch backend. Where that backend has no backward the line
  says why (csg0: torch has no derivative of the incomplete gamma in its shape; cnormal and
  clogistic: it calls ``.numpy()`` on a tensor that requires grad).

scoringrules' truncated/censored logistic returns NaN for every input with an infinite bound,
so it gets ``upper = loc + 600·scale`` (which changes the distribution by e⁻⁶⁰⁰). Then, on a
stress set of ``--stress`` points per family (locations far below 0 in units of the scale,
tiny scales, observations at 0 and within the distribution's own width; shapes ≪ 1 and ≫ 1
for csg0), the fraction of non-finite values each gives, and of negative ones (a CRPS is ≥ 0).

Usage: ``python benchmarks/families.py [--n N] [--repeats R] [--threads T] [--stress N]``; the
smallest setting, ``--n 1000 --repeats 1 --stress 1000``, runs in seconds. Run by hand on a
quiet machine; tests never time.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # nothing timed here needs BLAS

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np

FAMILIES = ("normal", "truncnormal", "trunclogistic", "cnormal", "clogistic", "csg0")


def timings(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, float]]:
    """``{name: (min, median)}`` seconds over ``repeats`` interleaved rounds of every function."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (min(v), float(np.median(v))) for k, v in times.items()}


def ordinary(name: str, n: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``n`` ordinary forecasts of the family (parameters by name) and observations."""
    if name == "normal":
        return {"mean": rng.normal(0, 2, n), "std": rng.uniform(0.05, 3, n)}, rng.normal(0, 3, n)
    if name == "csg0":
        p = {
            "shape": np.exp(rng.uniform(np.log(0.2), np.log(20), n)),
            "scale": rng.uniform(0.2, 3, n),
            "shift": rng.uniform(0, 2, n),
        }
    else:
        p = {"loc": rng.uniform(-3, 5, n), "scale": rng.uniform(0.2, 3, n)}
    return p, np.where(rng.random(n) < 0.2, 0.0, rng.exponential(2.0, n))


def stress(name: str, n: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Parameters where textbook forms overflow or cancel, and observations at 0 or nearby."""
    at_zero = rng.random(n) < 0.5
    if name == "normal":  # geopotential-sized values, tiny spreads
        mean = 5.5e4 + rng.normal(0, 300, n)
        std = 10.0 ** rng.uniform(-12, 0, n)
        return {"mean": mean, "std": std}, mean + std * rng.normal(0, 3, n)
    if name == "csg0":
        p = {
            "shape": 10.0 ** rng.uniform(-3, 3, n),
            "scale": 10.0 ** rng.uniform(-6, 1, n),
            "shift": 10.0 ** rng.uniform(-6, 1, n),
        }
        return p, np.where(at_zero, 0.0, rng.exponential(1.0, n) * p["shape"] * p["scale"])
    scale = 10.0 ** rng.uniform(-8, 1, n)
    loc = -scale * 10.0 ** rng.uniform(0, 4, n)  # 1 to 1e4 scales below 0
    # the distribution's own width above 0: σ²/|μ| for a normal tail, σ for a logistic one
    width = scale if "logistic" in name else scale * scale / np.abs(loc)
    return {"loc": loc, "scale": scale}, np.where(at_zero, 0.0, width * rng.exponential(1.0, n))


def scoringrules_crps(name: str, p: dict, y, backend: str):
    """scoringrules' CRPS of the family (numpy or torch backend)."""
    import scoringrules as sr

    if name == "normal":
        return sr.crps_normal(y, p["mean"], p["std"], backend=backend)
    if name == "csg0":
        return sr.crps_csg0(y, p["shape"], scale=p["scale"], shift=p["shift"], backend=backend)
    fn = {
        "truncnormal": sr.crps_tnormal,
        "cnormal": sr.crps_cnormal,
        "trunclogistic": sr.crps_tlogistic,
        "clogistic": sr.crps_clogistic,
    }[name]
    upper = p["loc"] + 600 * p["scale"] if "logistic" in name else float("inf")
    return fn(y, p["loc"], p["scale"], lower=0.0, upper=upper, backend=backend)


def backward_fn(forward: Callable[[], object], leaves: list) -> Callable[[], None]:
    """Forward and backward of the summed CRPS, the leaves' gradients reset each time."""

    def run() -> None:
        for t in leaves:
            t.grad = None
        forward().sum().backward()

    return run


def usable(name: str, p: dict[str, np.ndarray], ref: np.ndarray) -> np.ndarray:
    ok = np.isfinite(ref)
    if name.startswith("trunc"):  # scoringrules' truncated forms cancel below −3 scales
        ok &= p["loc"] > -3 * p["scale"]
    return ok


def compare(name: str, n: int, repeats: int) -> None:
    import torch

    from ensml.scores.distributions import get_family

    fam = get_family(name)
    label = f"crps {name} {n:.0e}".replace("e+0", "e").replace("e+", "e") + " float64"
    p, y = ordinary(name, n, np.random.default_rng(0))
    with np.errstate(all="ignore"):
        ours = fam.crps(p, y)
        ref = scoringrules_crps(name, p, y, "numpy")
    ok = usable(name, p, ref)
    diff = float(np.max(np.abs(ours[ok] - ref[ok])))  # CRPS values here are of order 1

    pt = {k: torch.from_numpy(v) for k, v in p.items()}
    yt = torch.from_numpy(y)
    leaves = {k: v.clone().requires_grad_() for k, v in pt.items()}
    y_leaf = yt.clone().requires_grad_()
    sr_leaves = {k: v.clone().requires_grad_() for k, v in pt.items()}
    sr_y_leaf = yt.clone().requires_grad_()

    def ours_grad() -> object:
        return fam.crps(leaves, y_leaf)

    def sr_grad() -> object:
        return scoringrules_crps(name, sr_leaves, sr_y_leaf, "torch")

    groups = {
        "numpy": (
            lambda: fam.crps(p, y),
            lambda: scoringrules_crps(name, p, y, "numpy"),
            "scoringrules numpy",
        ),
        "torch forward": (
            lambda: fam.crps(pt, yt),
            lambda: scoringrules_crps(name, pt, yt, "torch"),
            "scoringrules torch",
        ),
        "torch forward+backward": (
            backward_fn(ours_grad, [*leaves.values(), y_leaf]),
            backward_fn(sr_grad, [*sr_leaves.values(), sr_y_leaf]),
            "scoringrules torch",
        ),
    }
    for kind, (mine, theirs, peer) in groups.items():
        fns = {"ensml": mine}
        why = ""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                theirs()  # warm, and find out whether it runs at all
            fns[peer] = theirs
        except Exception as exc:  # a peer that cannot run is reported, not fatal
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
        mine()  # warm
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            res = timings(fns, repeats)
        tmin, tmed = res["ensml"]
        tag = label if kind == "numpy" else f"{label} {kind}"
        if why:
            print(f"{tag}: ensml min {tmin:.4f} / median {tmed:.4f} s, {peer} n/a ({why})", flush=True)
            continue
        pmin, pmed = res[peer]
        extra = f" (max |difference| {diff:.1e} on {ok.mean():.0%} of points)" if kind == "numpy" else ""
        print(
            f"{tag}: ensml min {tmin:.4f} / median {tmed:.4f} s, {peer} min {pmin:.4f} / median "
            f"{pmed:.4f} s -> {pmed / tmed:.1f}x{extra}",
            flush=True,
        )


def nonfinite(name: str, n: int) -> None:
    import torch

    from ensml.scores.distributions import get_family

    p, y = stress(name, n, np.random.default_rng(1))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ours = get_family(name).crps(p, y)
        ref = scoringrules_crps(name, p, y, "numpy")
        ref_t = scoringrules_crps(
            name, {k: torch.from_numpy(v) for k, v in p.items()}, torch.from_numpy(y), "torch"
        )
    fractions = [np.mean(~np.isfinite(a)) for a in (ours, ref, ref_t.numpy())]
    print(
        f"non-finite {name} stress {n:.0e}".replace("e+0", "e").replace("e+", "e")
        + f": ensml {fractions[0]:.2%}, scoringrules numpy {fractions[1]:.2%}, "
        f"scoringrules torch {fractions[2]:.2%} (negative: ensml {np.mean(ours < 0):.2%}, "
        f"scoringrules numpy {np.mean(ref < 0):.2%})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="points per family (default 1e6)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds per implementation")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--stress", type=int, default=100_000, help="points of the stress set per family")
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset")
    args = p.parse_args(argv)

    import scoringrules
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"env: {os.cpu_count()} cores, torch {torch.__version__} on {torch.get_num_threads()} threads "
        f"(ensml, and scoringrules' torch backend), scoringrules {scoringrules.__version__} numpy "
        f"backend single-threaded numpy {np.__version__}; {args.repeats} interleaved repeats, ratios "
        "of medians",
        flush=True,
    )
    names = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        p.error(f"unknown families {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    for name in names:
        compare(name, args.n, args.repeats)
    for name in names:
        nonfinite(name, args.stress)


if __name__ == "__main__":
    main()
