"""The testbed's two runs: the truth (one long run) and the ensemble forecasts started from it.

The experiment (Held–Suarez world, perpetual equinox, no orography):

* **Truth**: the :data:`TRUTH` model, spun up from rest for ``spinup_days``, then run through
  every init and valid time; its states on pressure levels (and its 10 m wind speed) are the
  verifying analysis.
* **Analysis error**: a forecast from init time *i* starts from the truth plus one random
  field (:data:`ANALYSIS_ERROR` of the truth's climate variability), the same for every member.
* **Members**: each adds its own smaller perturbation (:data:`MEMBER_PERTURBATION`), so the
  ensemble starts under-dispersive, as operational ensembles are.
* **Random fields**: random combinations of the truth's anomalies on the last
  :data:`POOL_DAYS` days of its spin-up (the "random field" perturbations of Magnusson et al.
  2009, QJRMS 135, 1179): each is a sum of model states, so it is balanced and has the
  climate's spatial structure; random large-scale noise instead excites gravity waves that
  swamp the first day.
* **Imperfect model**: the members run :data:`FORECAST`: a time step twice the truth's,
  stronger diffusion (a lower-order spectral filter) and other forcing constants (weaker
  boundary-layer friction, a larger equator-to-pole contrast and faster surface cooling), so
  forecasts drift towards another climate, with errors that depend on the flow.

Every random field is drawn from a generator seeded by (seed, init index), and the forecasts
run in fixed batches of :data:`CHUNK_INITS` init times, so the data do not depend on how many
worker processes run them.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ensml.compat import terminate_workers
from ensml.data.physics.core import Core, ModelConfig
from ensml.data.physics.forcing import HeldSuarez
from ensml.errors import EnsmlError

TRUTH = ModelConfig(dt_minutes=30.0)
FORECAST = ModelConfig(
    dt_minutes=60.0, filter_order=14, forcing=HeldSuarez(k_f=0.7, delta_t_y=66.0, k_s=1.0 / 3.0)
)
#: The initial error common to the members, as a fraction of the climate's standard deviation.
ANALYSIS_ERROR = 0.12
#: Each member's own initial perturbation, as a fraction of the climate's standard deviation.
MEMBER_PERTURBATION = 0.10
#: Days at the end of the spin-up whose daily states make the random fields (at most).
POOL_DAYS = 30
#: Init times per forecast batch (× members states step together).
CHUNK_INITS = 5
#: Amplitude (K) of the noise that breaks the symmetry of the state at rest.
SPINUP_NOISE_K = 0.1
#: The fields written, as :meth:`~ensml.data.physics.core.Core.outputs` returns them: z and t on
#: pressure levels, the 10 m wind speed si10 on none.
VARIABLES = ("z", "t", "si10")
#: The truth's 10 m wind components (:meth:`~ensml.data.physics.core.Core.wind`), kept beside its
#: fields for the stations' wind direction and never written to the grid files.
TRUTH_WIND = ("u10", "v10")


@dataclass(frozen=True)
class Plan:
    """What to run: times in hours from the first init, levels, members, seed and the models."""

    levels: tuple[int, ...]
    lead_hours: tuple[int, ...]
    every_hours: int
    inits: int
    members: int
    spinup_days: int
    seed: int
    truth: ModelConfig = TRUTH
    forecast: ModelConfig = FORECAST

    @property
    def record_hours(self) -> int:
        """Hours between the analysis times: every init and valid time falls on one."""
        return math.gcd(self.every_hours, *self.lead_hours)

    @property
    def records(self) -> int:
        """Analysis times, the first init to the last valid time."""
        span = (self.inits - 1) * self.every_hours + max(self.lead_hours)
        return span // self.record_hours + 1


def spin_up(plan: Plan, core: Core) -> tuple[object, dict[str, np.ndarray]]:
    """The truth's state after ``spinup_days`` from rest, and its daily anomalies over the last
    :data:`POOL_DAYS` of them (modal arrays, (days, layers, m, l)) for the random fields."""
    rest = core.rest(1)
    state = core.perturb(rest, SPINUP_NOISE_K, 0.0, torch.Generator().manual_seed(plan.seed))
    pool: list[dict] = []
    for day in range(plan.spinup_days):
        state = core.advance(state, 24)
        if plan.spinup_days - day <= POOL_DAYS:
            pool.append(core.state_arrays(state))
    stacked = {k: np.concatenate([p[k] for p in pool]).astype(np.float64) for k in pool[0]}
    return state, {k: v - v.mean(axis=0) for k, v in stacked.items()}


def random_fields(anomalies: dict[str, np.ndarray], count: int, scale: float, rng) -> dict[str, np.ndarray]:
    """``count`` random fields, each ``scale`` × a combination of the anomalies with independent
    N(0, 1/(n−1)) weights: zero mean, and ``scale``² × the pool's variance at every point."""
    n = next(iter(anomalies.values())).shape[0]
    weights = rng.standard_normal((count, n)) / np.sqrt(n - 1)
    return {k: scale * np.tensordot(weights, a, axes=1) for k, a in anomalies.items()}


def initial_states(plan: Plan, init: int, truth: dict, anomalies: dict) -> dict[str, np.ndarray]:
    """The members' initial states of init ``init`` (members, layers, m, l), from its truth."""
    rng = np.random.default_rng([plan.seed, init])
    analysis = random_fields(anomalies, 1, ANALYSIS_ERROR, rng)
    members = random_fields(anomalies, plan.members, MEMBER_PERTURBATION, rng)
    return {k: (truth[k] + analysis[k] + members[k]).astype(np.float32) for k in truth}


def run_truth(plan: Plan, core: Core, on_init: Callable[[int, dict], None]) -> dict[str, np.ndarray]:
    """The truth at every analysis time: (records, level, lat, lon) for z and t on pressure
    levels, (records, lat, lon) for si10 (:meth:`~ensml.data.physics.core.Core.outputs`) and for
    the 10 m wind components of :data:`TRUTH_WIND` (:meth:`~ensml.data.physics.core.Core.wind`).

    ``on_init(i, members)`` is called with the members' initial states of every init time as
    the run passes it (:func:`initial_states`), so forecasts can start while the truth goes on.
    """
    state, anomalies = spin_up(plan, core)
    fields: dict[str, list] = {name: [] for name in VARIABLES + TRUTH_WIND}
    per_init = plan.every_hours // plan.record_hours
    for r in range(plan.records):
        if r:
            state = core.advance(state, plan.record_hours)
        wind = dict(zip(TRUTH_WIND, core.wind(state)))
        for name, values in {**core.outputs(state, plan.levels), **wind}.items():
            fields[name].append(values[0])
        if r % per_init == 0 and r // per_init < plan.inits:
            on_init(r // per_init, initial_states(plan, r // per_init, core.state_arrays(state), anomalies))
    return {name: np.stack(values) for name, values in fields.items()}


def forecast_chunk(plan: Plan, starts: list[dict]) -> dict[str, np.ndarray]:
    """Forecasts from the members' initial states of some inits: (init, lead, member, [level,]
    lat, lon) per variable, the level for z and t only."""
    core = core_for(plan.forecast)
    state = core.from_arrays({k: np.concatenate([s[k] for s in starts]) for k in starts[0]})
    out: dict[str, list] = {name: [] for name in VARIABLES}
    previous = 0
    for lead in plan.lead_hours:
        state = core.advance(state, lead - previous) if lead > previous else state
        previous = lead
        for name, values in core.outputs(state, plan.levels).items():
            out[name].append(values.reshape(len(starts), plan.members, *values.shape[1:]))
    return {name: np.stack(values, axis=1) for name, values in out.items()}


_CORES: dict[ModelConfig, Core] = {}


def core_for(config: ModelConfig) -> Core:
    """This process's model of ``config`` (built once: the transforms take a moment)."""
    if config not in _CORES:
        _CORES[config] = Core(config)
    return _CORES[config]


def _one_thread() -> None:
    torch.set_num_threads(1)


def run_all(plan: Plan, workers: int, on_forecasts: Callable[[int], None]) -> tuple[dict, dict]:
    """The truth (in this process) and every forecast (in ``workers`` processes, or here if 1).

    Returns (analysis, forecast): per variable, (records, [level,] lat, lon) and (init, lead,
    member, [level,] lat, lon), the level for z and t only; the analysis also holds the truth's
    10 m wind components (:data:`TRUTH_WIND`). ``on_forecasts(n)`` is called as
    ``n`` more inits are done.
    """
    torch.set_num_threads(1)
    chunks: dict[int, dict] = {}
    pending: list[dict] = []
    futures: dict[Future, int] = {}

    def collect(block: bool) -> None:
        done, _ = wait(list(futures), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in done:
            first = futures.pop(future)
            try:
                chunks[first] = future.result()
            except BrokenProcessPool:
                raise EnsmlError(
                    "physics: a forecast worker process died (out of memory, killed, or started from a "
                    "script without the if __name__ == '__main__': guard); try workers=1"
                ) from None
            on_forecasts(len(chunks[first]["z"]))

    with _pool(workers) as pool:

        def on_init(i: int, arrays: dict) -> None:
            pending.append(arrays)
            if len(pending) == CHUNK_INITS or i == plan.inits - 1:
                first = i + 1 - len(pending)
                if pool is None:
                    chunks[first] = forecast_chunk(plan, list(pending))
                    on_forecasts(len(pending))
                else:
                    futures[pool.submit(forecast_chunk, plan, list(pending))] = first
                    collect(block=False)
                pending.clear()

        truth = run_truth(plan, core_for(plan.truth), on_init)
        while futures:
            collect(block=True)
    forecast = {name: np.concatenate([chunks[k][name] for k in sorted(chunks)]) for name in VARIABLES}
    return truth, forecast


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """A spawn-context process pool of ``workers`` (None for 1: run in this process); on an
    error or Ctrl-C the queued forecasts are cancelled instead of waited for."""
    if workers <= 1:
        yield None
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread)
    try:
        yield pool
    except BaseException:  # an error, Ctrl-C or SIGTERM: cancel the queue, stop the workers, re-raise
        pool.shutdown(wait=False, cancel_futures=True)
        terminate_workers(pool)  # else the exit waits for the forecasts in flight (minutes)
        raise
    pool.shutdown(wait=True)
