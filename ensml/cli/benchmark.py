"""``ensml benchmark``: train every model of the zoo on the embedded data and compare them in one table.

A config with ``stations`` (``configs/benchmark/stations.yaml``), or ``--stations N``, is a station benchmark
(:func:`ensml.experiments.benchmark_stations.benchmark_stations`, whose signature declares its
options): raw, EMOS and station DRNs side by side at stations. A config with ``generative``
(``configs/benchmark/generative.yaml``) is a generative benchmark
(:func:`ensml.experiments.benchmark_generative.benchmark_generative`): generated members against
ECC-Q, the Schaake shuffle and a Gaussian copula, scored as fields.
"""

from __future__ import annotations

from ensml.cli.verb import config_keys, run_function

#: The command this module runs: its options and help are the library function's.
COMMANDS = {"benchmark": "ensml.experiments.benchmark:benchmark"}
#: What ``ensml benchmark`` runs for a config with ``stations``.
STATION_BENCHMARK = "ensml.experiments.benchmark_stations:benchmark_stations"
#: What ``ensml benchmark`` runs for a config with ``generative``.
GENERATIVE_BENCHMARK = "ensml.experiments.benchmark_generative:benchmark_generative"
SUMMARIES = {"benchmark": "Train and score every model; write benchmark.csv and benchmark.md to out_dir."}


def run(args: list[str]) -> None:
    """Run ``ensml benchmark ARGS`` (a station benchmark for a config with ``stations`` or
    ``--stations``, a generative benchmark for one with ``generative``)."""
    keys = config_keys(args[1:])
    stations = "stations" in keys or any(a.partition("=")[0] == "--stations" for a in args[1:])
    target = STATION_BENCHMARK if stations else COMMANDS["benchmark"]
    if "generative" in keys:
        target = GENERATIVE_BENCHMARK
    run_function(target, args)
