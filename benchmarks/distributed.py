"""Synchronous DDP against WAGMA-SGD and eager-SGD (solo, majority), with and without a straggler.

Run by hand:  python benchmarks/distributed.py [--epochs 6] [--batches 24] [--slowdown 2] [--budget 2]
              [--repeats 1]

Every run is ``ensml fit --config configs/distributed.yaml`` on the embedded data: 4 gloo ranks
of one thread each (on this 2-core machine they share the cores), the demo's MixedTask at width
8, batch 4 per rank, ``--batches`` steps per rank and epoch, a validation after each epoch (rank
0's share of the validation split: 23 samples). DDP trains ``--epochs`` epochs; the
decentralised strategies ``--budget`` times as many, so that a run that ends an epoch's worth
short of DDP's CRPS can still show when (or whether) it gets there. A straggler run slows rank 1
by ``--slowdown`` (its own compute of each batch, stretched by sleeping:
``ensml.train.stragglers.Stragglers``).

Printed per run (the median over ``--repeats``, min in brackets):

- ``train s``: wall time of training, validation excluded (``time/train_s``);
- ``samples/s``: samples the ranks computed a gradient for (a batch a late rank skips is not
  counted), over ``train s``;
- ``CRPS``: the validation CRPS (area-weighted, over variables, levels and leads) after as many
  steps as DDP's run, and its difference from the synchronous run of the same scenario; ``best``:
  the lowest over the whole (longer) run;
- ``to sync``: training time until the validation CRPS first reaches the synchronous run's final
  CRPS ("-" when it never does), and the synchronous run's time over it (the speed-up);
- ``stale``: stale contributions in the rounds rank 0 took part in.

Target (issue 31): with one rank 2x slower, a decentralised strategy reaches the synchronous
final CRPS in at least 1.3x less time, and ends within 1% of its CRPS.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "distributed.yaml"
STRATEGIES = ("ddp", "wagma", "eager_solo", "eager_majority")
TARGET_SPEEDUP, TARGET_CRPS = 1.3, 0.01
RANKS, BATCH = 4, 4


def fit(work: Path, strategy: str, args: argparse.Namespace, slow: bool) -> dict[str, object]:
    """One ``ensml fit`` in ``work``; its validation curve and contribution counts."""
    work.mkdir(parents=True)
    (work / "data").symlink_to(REPO / "data")
    epochs = args.epochs if strategy == "ddp" else math.ceil(args.epochs * args.budget)
    cmd = [sys.executable, "-m", "ensml.cli.main", "-q", "fit", "--config", str(CONFIG),
           f"--trainer.strategy={strategy}", f"--trainer.max_epochs={epochs}",
           f"--trainer.limit_train_batches={args.batches}", "--trainer.limit_val_batches=1.0",
           f"--data.batch_size={BATCH}", "--data.check_finite=false"]  # fmt: skip
    if slow:
        spec = {"class_path": "ensml.train.stragglers.Stragglers",
                "init_args": {"ranks": [1], "slowdown": args.slowdown}}  # fmt: skip
        cmd.append("--trainer.callbacks+=" + json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{strategy}: ensml fit failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    rows = list(csv.DictReader(open(work / "runs/distributed/metrics.csv")))
    curve = [(float(r["time/train_s"]), float(r["val/crps"])) for r in rows if r.get("val/crps")]
    last = [r for r in rows if r.get("val/crps")][args.epochs - 1]  # as many steps as DDP's
    steps = args.epochs * args.batches * RANKS
    computed = float(last["dist/computed_all"]) if last.get("dist/computed_all") else steps
    return {
        "curve": curve,
        "train_s": curve[args.epochs - 1][0],
        "samples": computed * BATCH,
        "crps": curve[args.epochs - 1][1],
        "best": min(c for _, c in curve),
        "stale": float(last.get("dist/stale", 0.0)),
    }


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """Training time at the first validation whose CRPS is at most ``target``."""
    return next((t for t, crps in curve if crps <= target * (1 + 1e-9)), None)


def _stat(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}]"


def report(results: dict[tuple[str, str], list[dict]]) -> None:
    columns = ("scenario", "strategy", "train s", "samples/s", "CRPS", "vs sync", "best", "to sync CRPS s",
               "speed-up", "stale")  # fmt: skip
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    verdict = []
    for scenario in ("balanced", "straggler"):
        sync = results.get((scenario, "ddp"))
        if not sync:
            continue
        target = statistics.median(r["crps"] for r in sync)
        sync_s = statistics.median(r["train_s"] for r in sync)
        for strategy in STRATEGIES:
            runs = results.get((scenario, strategy), [])
            if not runs:
                continue
            crps = statistics.median(r["crps"] for r in runs)
            best = statistics.median(r["best"] for r in runs)
            reach = [t for r in runs if (t := time_to(r["curve"], target)) is not None]
            speed = [sync_s / t for t in reach]
            rel = crps / target - 1
            train = _stat([r["train_s"] for r in runs], ".1f")
            rate = _stat([r["samples"] / r["train_s"] for r in runs], ".1f")
            stale = _stat([r["stale"] for r in runs], ".0f")
            print(
                f"| {scenario} | {strategy} | {train} | {rate} | {crps:.4f} | {rel:+.2%} | {best:.4f} | "
                f"{_stat(reach, '.1f')} | {_stat(speed, '.2f')}x | {stale} |"
            )
            if scenario == "straggler" and strategy != "ddp":
                ok = bool(speed) and statistics.median(speed) >= TARGET_SPEEDUP and abs(rel) <= TARGET_CRPS
                verdict.append(f"{strategy}: {'meets' if ok else 'misses'} the target")
    print(
        f"target (straggler {TARGET_SPEEDUP}x less time to the sync CRPS, CRPS within 1%): "
        + "; ".join(verdict)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batches", type=int, default=24, help="steps per rank and epoch")
    parser.add_argument("--slowdown", type=float, default=2.0)
    parser.add_argument("--budget", type=float, default=2.0, help="epochs of the others / DDP's")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument(
        "--scenarios", nargs="+", default=["balanced", "straggler"], choices=["balanced", "straggler"]
    )
    args = parser.parse_args()
    if "ddp" not in args.strategies:
        args.strategies.insert(0, "ddp")  # the reference
    print(
        f"{RANKS} gloo ranks x 1 thread, {os.cpu_count()} cores; {args.epochs} epochs x {args.batches} steps "
        f"of batch {BATCH} per rank (others: x{args.budget} epochs); straggler: rank 1 x{args.slowdown}; "
        f"{args.repeats} repeat(s)"
    )
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="ensml-distributed-") as tmp:
        for rep in range(args.repeats):
            for scenario in args.scenarios:
                for strategy in args.strategies:
                    run = fit(
                        Path(tmp) / f"{scenario}-{strategy}-{rep}", strategy, args, scenario == "straggler"
                    )
                    results.setdefault((scenario, strategy), []).append(run)
                    done = f"{run['train_s']:.1f} s, CRPS {run['crps']:.4f} (best {run['best']:.4f})"
                    print(f"  {scenario} {strategy} #{rep + 1}: {done}", flush=True)
    report(results)


if __name__ == "__main__":
    main()
