"""LightningDataModule: validate the files once, split by init date, serve sample batches."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import numpy as np
import xarray as xr
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveInt
from torch.utils.data import DataLoader

from ensml.compat import uses_distributed_sampler
from ensml.data.grid import cell_dim
from ensml.data.layouts.options import ReaderOptions
from ensml.data.open import open_inputs
from ensml.data.samples import EnsembleSamples, MemberSampling, SampleSpec, check_leads
from ensml.data.sampling import EpochPlan, EpochSampler
from ensml.data.splits import split_init_times
from ensml.data.staging import READER_MODES, PrefetchReaders
from ensml.data.static import read_static
from ensml.data.stats import compute_stats
from ensml.data.surface import broadcast_levels, surface_mask
from ensml.errors import EnsmlError, exception_reason
from ensml.machine import PER_CORE, cpu_cores
from ensml.names import DEFAULT_K, INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, TIME, check_distinct
from ensml.seeds import Seed, check_seed


def _check_distinct(**options: Sequence[object]) -> None:
    """Each of ``options`` names its values once, and ``variables`` at least one: a repeated
    level or variable would be read, trained on and scored twice."""
    for name, values in options.items():
        if name == "variables" and not list(values):
            raise EnsmlError("variables is empty: name at least one variable, e.g. [z, t]")
        check_distinct(name, values)


def _check_machine(num_workers: int, prefetch_workers: int, seed: int) -> None:
    """Refuse worker counts the machine cannot run (a hang, not an error, otherwise) and bad seeds."""
    cores = cpu_cores()
    cap = PER_CORE * cores
    for key, value in (("num_workers", num_workers), ("prefetch_workers", prefetch_workers)):
        if value > cap:
            raise EnsmlError(
                f"data.{key}={value} is more than this machine can run ({cap}: {PER_CORE} per "
                f"CPU core, {cores} cores)"
            )
    check_seed(seed, "data.seed")  # parsed as a Seed on the command line; this for Python callers


def _check_readers(prefetch_readers: str, prefetch_workers: int, num_workers: int) -> None:
    """Refuse a reader mode ensml does not know, and reader processes inside DataLoader workers."""
    if prefetch_readers not in READER_MODES:
        raise EnsmlError(
            f"data.prefetch_readers must be one of {', '.join(READER_MODES)}, got {prefetch_readers!r}"
        )
    if prefetch_readers == "processes" and prefetch_workers > 0 and num_workers > 0:
        raise EnsmlError(
            f"data.prefetch_readers=processes cannot run inside DataLoader workers "
            f"(data.num_workers={num_workers}): set prefetch_readers to auto or threads, or num_workers to 0"
        )


def _plain_hparams(module: L.LightningDataModule) -> None:
    """Range-checked values (jsonargparse's ``PositiveInt`` …) as plain ``int``/``float`` in hparams."""
    for hparams in (module.hparams, getattr(module, "_hparams_initial", {})):
        for key, value in list(hparams.items()):
            if (
                not isinstance(value, bool)
                and isinstance(value, int | float)
                and type(value) not in (int, float)
            ):
                hparams[key] = int(value) if isinstance(value, int) else float(value)


def _check_finite(ds: xr.Dataset, time_dim: str, name: str) -> None:
    """Raise naming the first variable and date with a NaN or infinite value."""
    for var in ds.data_vars:
        da = ds[var]
        try:
            bad = (~np.isfinite(da).all([d for d in da.dims if d != time_dim])).compute()
        except Exception as exc:  # corrupt data behind readable metadata
            reason = exception_reason(exc)
            raise EnsmlError(f"{name} cannot be read in {var!r} ({reason})") from None
        if bad.any():
            when = str(bad[time_dim].values[bad.values][0])[:16]
            raise EnsmlError(f"{name} has NaN or infinite values in {var!r} at {time_dim}={when}")


class EnsembleDataModule(L.LightningDataModule):
    """Ensemble forecasts (and analyses) split by init date into train / val / test.

    Parameters
    ----------
    forecast
        Forecast netCDF file(s) or glob pattern(s), dims (init_time, lead_time, member, level,
        latitude, longitude) or any alias ensml knows (number, step, isobaricInhPa, lat, lon).
    analysis
        Verifying analysis file(s), dims (time, level, latitude, longitude). Required for
        post-processing; optional for spread estimation.
    variables
        Variables to use.
    levels
        Pressure levels (hPa) to use.
    input_leads
        Lead times fed to the model: hours (``[0, 24, 48]``) or durations (``["0h", "P1D"]``;
        see :func:`ensml.times.parse_lead`).
    target_leads
        Lead time, or list of lead times, whose spread or analysis is predicted (each one of
        ``input_leads``). Several target leads make one model predict all of them (its outputs
        hold a ``lead_time`` dimension).
    k
        Size of the member subset given to the model (the research used 5 of 10).
    member_sampling
        ``first`` (members 0 … k-1) or ``random`` (a new subset per sample and epoch while
        training; validation and test always use the first k).
    train_period
        ``[start, end]`` dates (inclusive) of the training init times; samples whose valid
        times reach into a later split are dropped.
    val_period
        ``[start, end]`` dates (inclusive) of the validation init times (same rule).
    test_period
        ``[start, end]`` dates (inclusive) of the test init times.
    batch_size
        Samples per batch.
    num_workers
        DataLoader worker processes; each opens the files itself.
    seed
        Seed of the DataLoader shuffling and of the random member subsets.
    check_finite
        Scan the selected data once (lazily, with dask) for NaN/inf before training, so a bad
        value fails up front with the file, variable and date instead of mid-epoch.
    cache_mb
        Memory (MiB) each process may use to keep samples read from disk for the next epochs
        (the embedded data's training and validation splits need about 540); 0 reads every time.
    reader
        How to read the forecast files (:class:`~ensml.data.layouts.options.ReaderOptions`): GRIB
        ``filter_by_keys``, ``drop_control``, variable ``rename``; e.g. in YAML
        ``reader: {filter_by_keys: {dataType: pf}, rename: {2t: t2m}}``.
    analysis_reader
        The same for the analysis files.
    static
        A netCDF/GRIB/zarr file on the forecast's grid holding static fields of the surface
        (orography, land-sea mask, …) to feed the models as channels (:mod:`ensml.data.static`).
    static_variables
        The variables of ``static`` to use (linked to the model's ``static_variables``).
    prefetch_workers
        Readers per process that read samples ahead in the order the coming epochs will ask for
        them, into the ``cache_mb`` cache with clairvoyant eviction (:mod:`ensml.data.prefetch`),
        as many reads under way at once; 0 (the default here; the configs set 2, one a core on
        2 cores; 3 were no faster there at 361 x 720) reads each sample when it is asked for. They
        stop at ``teardown`` (Lightning calls it after a fit).
    prefetch_readers
        Where those reads run (:mod:`ensml.data.staging`). ``processes``: this process and
        ``prefetch_workers - 1`` reader processes, each with the files open, so reads run in
        parallel whatever the format (HDF5, under netCDF, lets one thread read at a time);
        until they are ready (a second or two) reads run in this process. ``threads``: all in
        this process (no start-up; parallel for zarr and for a netCDF-4 file or zarr v3 store
        read chunk by chunk, :mod:`ensml.data.direct_read`). ``auto`` (default): processes for
        samples that read more than 16 MiB (z and t at 2 levels, 5 of 10 members at 3 leads:
        92 MB at 361 x 720, 0.7 MB at 32 x 64) whose reads cannot decompress in threads, else
        threads. DataLoader workers (``num_workers`` > 0) read with threads; ``processes`` is
        refused with them.
    """

    def __init__(
        self,
        forecast: str | list[str],
        analysis: str | list[str] | None = None,
        variables: list[str] = ("z", "t"),  # type: ignore[assignment]
        levels: list[float] = (500, 850),  # type: ignore[assignment]
        input_leads: list[int | str] = (0, 24, 48),  # type: ignore[assignment]
        target_leads: int | str | list[int | str] = 48,
        k: PositiveInt = DEFAULT_K,
        member_sampling: MemberSampling = "first",
        train_period: tuple[str, str] = ("2017-01-01", "2019-06-30"),
        val_period: tuple[str, str] = ("2019-07-01", "2019-12-31"),
        test_period: tuple[str, str] = ("2020-01-01", "2020-12-31"),
        batch_size: PositiveInt = 8,
        num_workers: NonNegativeInt = 0,
        seed: Seed = 0,
        check_finite: bool = True,
        cache_mb: NonNegativeFloat = 2048.0,
        reader: ReaderOptions | None = None,
        analysis_reader: ReaderOptions | None = None,
        prefetch_workers: NonNegativeInt = 0,
        prefetch_readers: PrefetchReaders = "auto",
        static: str | None = None,
        static_variables: list[str] = (),  # type: ignore[assignment]
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        _plain_hparams(self)
        self.input_lead_values, self.target_lead_values = check_leads(input_leads, target_leads)
        if batch_size < 1:
            raise EnsmlError(f"batch_size must be at least 1, got {batch_size}")
        _check_distinct(variables=variables, levels=levels, static_variables=static_variables)
        _check_machine(num_workers, prefetch_workers, seed)
        if list(static_variables) and static is None:
            raise EnsmlError(
                f"static_variables {list(static_variables)} need data.static, the file that holds them"
            )
        if prefetch_workers < 0 or cache_mb < 0:
            raise EnsmlError(
                f"prefetch_workers and cache_mb must be >= 0, got {prefetch_workers} and {cache_mb}"
            )
        _check_readers(prefetch_readers, prefetch_workers, num_workers)
        self._spec: SampleSpec | None = None
        self._splits: dict[str, np.ndarray] | None = None
        self._stats: dict[str, np.ndarray] | None = None
        self.coords: dict[str, np.ndarray] = {}
        # (latitude, longitude) slices read by this process; set by spatial-parallel training.
        self.slab: tuple[slice, slice] | None = None

    # -- validation and metadata (main process, lazy dask arrays) ---------------------------
    def _inspect(self) -> None:
        hp = self.hparams
        inputs = open_inputs(
            hp.forecast,
            hp.analysis,
            variables=hp.variables,
            levels=hp.levels,
            leads=self.input_lead_values,
            k=hp.k,
            chunks="auto",
            reader=hp.reader,
            analysis_reader=hp.analysis_reader,
        )
        fc, an, name = inputs.forecast, inputs.analysis, inputs.names[0]
        cells = cell_dim(fc)
        if cells is not None:  # the U-Net convolves a latitude x longitude grid
            raise EnsmlError(
                f"{name} is on {fc.sizes[cells]} cells of an unstructured grid; training needs a regular "
                "latitude x longitude grid (regrid it first; evaluate scores grids of cells)"
            )
        surface = surface_mask(fc, hp.variables)
        # Surface variables: one channel repeated over the levels (ensml.data.surface).
        fc = broadcast_levels(fc.sel({LEVEL: list(hp.levels)}) if LEVEL in fc.dims else fc)
        self._spec = SampleSpec(
            variables=tuple(hp.variables),
            levels=tuple(float(x) for x in hp.levels),
            input_leads=tuple(self.input_lead_values),
            target_leads=tuple(self.target_lead_values),
            k=int(hp.k),
            members=inputs.members,
        )
        max_lead = max(self._spec.input_leads)
        periods = {"train": hp.train_period, "val": hp.val_period, "test": hp.test_period}
        splits = split_init_times(fc[INIT_TIME].values, periods, max_lead, source=name)
        if an is not None:  # a sample needs the analysis at its init and at every target lead
            verified_at = [np.timedelta64(0, "ns"), *self._spec.target_leads]
            for split, inits in splits.items():
                splits[split] = inputs.verified(inits, verified_at)
                if not splits[split].size:
                    raise EnsmlError(
                        f"analysis {hp.analysis} has no dates in common with the {split} split of {name}"
                    )
        self._splits = splits
        if hp.check_finite:
            used = np.concatenate(list(splits.values()))
            sel = {LEVEL: list(self._spec.levels)}
            _check_finite(
                fc.sel({**sel, INIT_TIME: used, LEAD_TIME: list(self._spec.input_leads)}), INIT_TIME, name
            )
            if an is not None:
                valid = np.unique(np.concatenate([used, *(used + lead for lead in self._spec.target_leads)]))
                _check_finite(an.sel({**sel, TIME: valid}), TIME, f"analysis {hp.analysis}")
        self._stats = compute_stats(
            fc,
            splits["train"],
            self._spec.variables,
            self._spec.levels,
            self._spec.input_leads,
            self._spec.target_leads,
        )
        self._stats["surface"] = surface
        self.coords = {LATITUDE: fc[LATITUDE].values, LONGITUDE: fc[LONGITUDE].values}
        if hp.static is not None:
            self._stats["static"] = read_static(hp.static, list(hp.static_variables), *self.coords.values())

    @property
    def spec(self) -> SampleSpec:
        if self._spec is None:
            self._inspect()
        return self._spec

    @property
    def stats(self) -> dict[str, np.ndarray]:
        """Normalisation statistics of the training split (see :func:`compute_stats`)."""
        if self._stats is None:
            self._inspect()
        return self._stats

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(latitude, longitude) sizes of the grid (opens and validates the files once)."""
        if not self.coords:
            self._inspect()
        return len(self.coords[LATITUDE]), len(self.coords[LONGITUDE])

    def init_times(self, split: str) -> np.ndarray:
        if self._splits is None:
            self._inspect()
        return self._splits[split]

    # -- Lightning hooks ------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if self._spec is None:
            self._inspect()

        def make(split: str, sampling: MemberSampling) -> EnsembleSamples:
            return EnsembleSamples(
                hp.forecast,
                hp.analysis,
                self.init_times(split),
                self.spec,
                sampling,
                slab=self.slab,
                cache_mb=hp.cache_mb if split != "test" else 0.0,
                seed=hp.seed,
                reader=hp.reader,
                analysis_reader=hp.analysis_reader,
            )

        self.train_set = make("train", hp.member_sampling)
        self.val_set = make("val", "first")
        self.test_set = make("test", "first")

    def _loader(self, dataset: EnsembleSamples, shuffle: bool) -> DataLoader:
        hp = self.hparams
        replicas = self._replicas()
        sampler = EpochSampler(dataset, *replicas, seed=hp.seed) if shuffle else None
        # What this process (or each of its workers) will read, epoch by epoch: read it ahead.
        plan = EpochPlan(len(dataset), hp.batch_size, hp.num_workers, shuffle, hp.seed, *replicas)
        # Unshuffled under DDP, Lightning splits the order itself: no plan to follow then.
        dataset.plan = plan if shuffle or replicas[0] == 1 else None
        dataset.prefetch_workers = hp.prefetch_workers
        dataset.prefetch_readers = hp.prefetch_readers
        if dataset.plan is not None and hp.prefetch_workers > 0 and hp.num_workers == 0:
            dataset.stage()  # reader processes start now, not at the first batch
        return DataLoader(
            dataset,
            batch_size=hp.batch_size,
            sampler=sampler,
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
            multiprocessing_context="forkserver" if hp.num_workers > 0 else None,
        )

    def _replicas(self) -> tuple[int, int]:
        """(number of data-parallel replicas, this process's replica) of the running trainer."""
        trainer = self.trainer
        if trainer is None or not uses_distributed_sampler(trainer):
            return 1, 0
        kwargs = getattr(trainer.strategy, "distributed_sampler_kwargs", None) or {}
        return int(kwargs.get("num_replicas", 1)), int(kwargs.get("rank", 0))

    def teardown(self, stage: str) -> None:
        """Stop the prefetch threads and reader processes (after fit, validate, test or predict)."""
        for name in ("train_set", "val_set", "test_set"):
            if hasattr(self, name):
                getattr(self, name).close()

    def train_dataloader(self) -> DataLoader:
        """Training batches in an order that depends only on ``seed`` and the epoch.

        A resumed run therefore sees what the uninterrupted run saw (see
        :class:`~ensml.data.sampling.EpochSampler`); under DDP each replica reads its share.
        """
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, shuffle=False)

    @property
    def predict_set(self) -> EnsembleSamples:
        """Prediction runs over the test split."""
        return self.test_set

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.predict_set, shuffle=False)
