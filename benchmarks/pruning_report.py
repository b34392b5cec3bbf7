"""The tables, prune potentials and plot of ``benchmarks/pruning.py`` (run that script)."""

from __future__ import annotations

NOISE = (0.1, 0.3)
METRICS = {
    "crps": "CRPS",
    "storm": "CRPS storms",
    "ssr": "spread/skill",
    "flat": "PIT flatness",
    "rel": "Brier REL q90",
    "shift": "CRPS shifted year",
    **{f"noise{f}": f"CRPS noise {f}σ" for f in NOISE},
}


def change(key: str, m: dict, ref: dict) -> float:
    """Relative change of a metric against the dense model's (spread/skill: of |ratio - 1|)."""
    if key == "ssr":
        return abs(m[key] - 1) - abs(ref[key] - 1)
    return m[key] / ref[key] - 1


# -- output -----------------------------------------------------------------------------------
def table(rows: list[dict], ref: dict) -> str:
    head = ["model", "sparsity", "non-zero params", *METRICS.values(), "ms/sample min/median", "speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["method"], f"{r['sparsity']:.0%}", f"{r['nonzero']:,}"]
        for k in METRICS:
            if k == "ssr":
                cells.append(f"{r[k]:.3f} ({100 * change(k, r, ref):+.1f})")
            else:
                cells.append(f"{r[k]:.4g} ({change(k, r, ref):+.1%})")
        lines.append("| " + " | ".join([*cells, r["time"], f"{r['speed']:.2f}x"]) + " |")
    return "\n".join(lines)


def potentials(rows: list[dict], ref: dict, methods: list[str]) -> str:
    """Each metric's largest sparsity within 1% of ``ref`` per method, and where it differs from CRPS."""
    lines = [
        f"prune potential against {ref['method']} (largest sparsity within 1%; spread/skill: |r-1| +0.01):"
    ]
    differ = []
    for method in methods:
        pot = {
            k: max(
                [0.0] + [r["sparsity"] for r in rows if r["method"] == method and change(k, r, ref) <= 0.01]
            )
            for k in METRICS
        }
        lines.append(f"  {method}: " + ", ".join(f"{METRICS[k]} {v:.0%}" for k, v in pot.items()))
        differ += [
            f"{method} {METRICS[k]} {v:.0%} (CRPS {pot['crps']:.0%})"
            for k, v in pot.items()
            if v != pot["crps"]
        ]
    lines.append("differ from the mean CRPS's: " + ("; ".join(differ) or "none"))
    return "\n".join(lines)


def plot(rows: list[dict], ref: dict, methods: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(15, 6.5), sharex=True, constrained_layout=True)
    for ax, (k, label) in zip(axes.flat, METRICS.items(), strict=True):
        ax.axhspan(-1, 1, color="0.85", label="±1%")
        ax.axhline(0, color="0.4", lw=0.8)
        for method in methods:
            rs = [r for r in rows if r["method"] == method]
            ax.plot(
                [0] + [100 * r["sparsity"] for r in rs],
                [0] + [100 * change(k, r, ref) for r in rs],
                marker="o",
                label=method,
            )
        for r in [r for r in rows if r["method"] == "dense + retraining"]:
            ax.plot(0, 100 * change(k, r, ref), "k*", ms=9, label=r["method"])
        ax.set_title(label)
        ax.set_ylabel("change of |ratio-1| (×100)" if k == "ssr" else "change vs dense (%)")
    for ax in axes[-1]:
        ax.set_xlabel("sparsity (%)")
    axes.flat[0].legend()
    fig.savefig(path, dpi=110)
