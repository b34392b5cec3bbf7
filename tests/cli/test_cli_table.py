"""Impossible options of every verb, table-driven: one ``ensml:`` line, the exit code, no harm done.

Each row runs ``ensml ARGS`` in-process (a few in a subprocess, for ``-q`` and the console
script) inside a sandbox of a user's files: hidden temporaries that look like ensml's
(``.name.abc123.tmp/``), files named like ensml's products, a sibling folder and a
``benchmark.md``. Every row must exit with the expected code, print exactly one line on stderr
(no traceback, no usage block, under ``-q`` no Lightning notes), and leave every file of the
sandbox and of the inputs byte-identical (sha256 before and after). The rows fail while the
options are checked, before any work: the table stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli.bad_rows import FIT, Row, check, hashes, inputs, row_args, run_row, sandbox  # noqa: F401 - inputs: a fixture
from tests.cli.process import run_cli

GEN = "fit --config {generative} {data}"
SYNTH = "data synth --out_dir out"
PHYS = "data physics --out_dir out"
ARCHIVE = "data archive --forecast {fc} --out_dir out"
EVAL = "evaluate --forecast {fc} --analysis {an} --out_dir out"
REPORT = "report --forecast {fc} --analysis {an} --out_dir out"
PP = "postprocess --checkpoints [{dir}/no.ckpt] --forecasts {fc} --out_dir out"
PLAN = "plan-parallel --n_lat 16 --n_lon 32 --n_level 2"
RANGE = "is out of range"
DATES = "1677-09-22 … 2262-04-11"  # what datetime64[ns] holds
SEEDS = "<= 4294967295"  # 2**32 - 1, numpy's legacy generator's largest seed
LEADS = "<= 87600 h"  # ten years
LONG_NAME = "a" * 300  # over NAME_MAX (255 bytes)
LONG_PATH = ("b" * 200 + "/") * 21  # over PATH_MAX (4096 bytes), every name within NAME_MAX

ROWS: list[Row] = [
    # -- fit / validate / test / predict: the task's, the data module's and Lightning's options ----
    ("fit: width negative", FIT + " --model.init_args.width -4", 1, ("--model.init_args.width", "-4", RANGE)),
    ("fit: width zero", FIT + " --model.init_args.width 0", 1, ("--model.init_args.width", RANGE)),
    (
        "fit: width huge",
        FIT + " --model.init_args.width 100000000",
        1,
        ("--model.init_args.width", "<= 4096"),
    ),
    (
        "fit: width not a number",
        FIT + " --model.init_args.width wide",
        1,
        ("--model.init_args.width", "expected an integer", "wide"),
    ),
    ("fit: width a fraction", FIT + " --model.init_args.width 2.5", 1, ("--model.init_args.width", "2.5")),
    ("fit: depth negative", FIT + " --model.init_args.depth -1", 1, ("--model.init_args.depth", RANGE)),
    ("fit: depth huge", FIT + " --model.init_args.depth 99", 1, ("--model.init_args.depth", RANGE)),
    (
        "fit: kernel size zero",
        FIT + " --model.init_args.kernel_size 0",
        1,
        ("--model.init_args.kernel_size", RANGE),
    ),
    (
        "fit: norm groups not dividing the width",
        FIT + " --model.init_args.width 6 --model.init_args.norm_groups 4",
        1,
        ("norm_groups=4 must divide width=6",),
    ),
    (
        "fit: norm groups negative",
        FIT + " --model.init_args.norm_groups -2",
        1,
        ("--model.init_args.norm_groups", RANGE),
    ),
    (
        "fit: generative with one training member",
        GEN + " --model.init_args.train_members 1",
        1,
        ("train_members must be at least 2", "got 1"),
    ),
    (
        "fit: generative with a temporal network",
        GEN + " --model.init_args.arch convgru",
        1,
        ("GenerativeTask's trunk is the unet3d network", "'convgru'"),
    ),
    (
        "fit: generative head with an even kernel",
        GEN + " --model.init_args.head_kernel 2",
        1,
        ("head_kernel must be odd", "got 2"),
    ),
    (
        "fit: generative variogram score of one point",
        GEN + " --model.init_args.vs_points 1",
        1,
        ("vs_points must be at least 2", "got 1"),
    ),
    (
        "fit: generative without noise scales",
        GEN + " --model.init_args.noise_scales []",
        1,
        ("noise_scales must name at least one scale",),
    ),
    (
        "fit: generative noise scale zero",
        GEN + " --model.init_args.noise_scales [1,0]",
        1,
        ("--model.init_args.noise_scales", "0"),
    ),
    (
        "fit: generative no noise channels",
        GEN + " --model.init_args.noise_channels 0",
        1,
        ("--model.init_args.noise_channels", RANGE),
    ),
    ("fit: generative patch zero", GEN + " --model.init_args.patch 0", 1, ("--model.init_args.patch", RANGE)),
    (
        "fit: generative energy-score weight negative",
        GEN + " --model.init_args.es_weight -1",
        1,
        ("--model.init_args.es_weight", RANGE),
    ),
    (
        "fit: generative no members to draw",
        GEN + " --model.init_args.n_members 0",
        1,
        ("--model.init_args.n_members", RANGE),
    ),
    (
        "fit: generative seed negative",
        GEN + " --model.init_args.sample_seed -3",
        1,
        ("--model.init_args.sample_seed", RANGE),
    ),
    ("fit: learning rate negative", FIT + " --model.init_args.lr -1", 1, ("--model.init_args.lr", RANGE)),
    ("fit: learning rate zero", FIT + " --model.init_args.lr 0", 1, ("--model.init_args.lr", RANGE)),
    (
        "fit: weight decay negative",
        FIT + " --model.init_args.weight_decay -0.1",
        1,
        ("--model.init_args.weight_decay", RANGE),
    ),
    (
        "fit: local lr factor zero",
        FIT + " --model.init_args.local_lr_factor 0",
        1,
        ("--model.init_args.local_lr_factor", RANGE),
    ),
    ("fit: model scheme unknown", FIT + " --model.init_args.scheme three", 1, ("--model.init_args.scheme",)),
    ("fit: seed negative", FIT + " --seed_everything -5", 1, ("--seed_everything", "-5", RANGE)),
    ("fit: seed huge", FIT + " --seed_everything 99999999999", 1, ("--seed_everything", RANGE)),
    ("fit: seed not a number", FIT + " --seed_everything abc", 1, ("--seed_everything",)),
    (
        "fit: accelerator gpu without a GPU",
        FIT + " --trainer.accelerator gpu",
        1,
        ("no GPU on this machine", "--trainer.accelerator cpu"),
    ),
    (
        "fit: accelerator cuda without a GPU",
        FIT + " --trainer.accelerator cuda",
        1,
        ("no GPU on this machine",),
    ),
    ("fit: accelerator tpu without a TPU", FIT + " --trainer.accelerator tpu", 1, ("no TPU",)),
    ("fit: accelerator unknown", FIT + " --trainer.accelerator nope", 1, ("--trainer.accelerator", "'nope'")),
    (
        "fit: eager-SGD with gradient accumulation",
        FIT + " --trainer.devices 2 --trainer.strategy eager_solo --trainer.accumulate_grad_batches 2",
        1,
        ("eager", "accumulate_grad_batches: 1"),
    ),
    (
        "fit: eager quorum above the ranks",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.EagerStrategy","init_args":{{"quorum":3}}}}',
        1,
        ("quorum 3", "2 ranks"),
    ),
    (
        "fit: eager quorum unknown word",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.EagerStrategy","init_args":{{"quorum":"most"}}}}',
        1,
        ("--trainer.strategy", "most"),
    ),
    (
        "fit: wagma group larger than the world",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.WagmaStrategy","init_args":{{"group_size":4}}}}',
        1,
        ("group_size 4", "2 ranks"),
    ),
    (
        "fit: wagma group quorum above the group",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.WagmaStrategy","init_args":{{"group_quorum":3}}}}',
        1,
        ("group_quorum=3",),
    ),
    (
        "fit: wagma negative period",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.WagmaStrategy","init_args":{{"period":-1}}}}',
        1,
        ("period=-1",),
    ),
    (
        "fit: eager SIGTERM interval zero",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.EagerStrategy","init_args":{{"sigterm_every":0}}}}',
        1,
        ("sigterm_every must be a positive number", "got 0"),
    ),
    (
        "fit: wagma timeout zero",
        FIT
        + ' --trainer.devices 2 --trainer.strategy {{"class_path":"ensml.train.decentralised.WagmaStrategy","init_args":{{"timeout_s":0}}}}',
        1,
        ("timeout_s must be positive",),
    ),
    (
        "fit: strategy name misspelt",
        FIT + " --trainer.devices 2 --trainer.strategy wagmaa",
        1,
        ("--trainer.strategy", "'wagmaa'"),
    ),
    (
        "fit: straggler speed-up",
        FIT
        + ' --trainer.callbacks+ {{"class_path":"ensml.train.stragglers.Stragglers","init_args":{{"slowdown":0.5}}}}',
        1,
        ("slowdown=0.5",),
    ),
    (
        "fit: straggler negative rank",
        FIT
        + ' --trainer.callbacks+ {{"class_path":"ensml.train.stragglers.Stragglers","init_args":{{"ranks":[-1]}}}}',
        1,
        ("ranks must be >= 0",),
    ),
    (
        "fit: devices huge on CPU",
        FIT + " --trainer.devices 100000",
        1,
        ("--trainer.devices", "more than this machine"),
    ),
    ("fit: devices zero", FIT + " --trainer.devices 0", 1, ("devices",)),
    ("fit: max epochs negative", FIT + " --trainer.max_epochs -3", 1, ("max_epochs",)),
    (
        "fit: data workers huge",
        FIT + " --data.num_workers 100000",
        1,
        ("data.num_workers=100000", "more than this machine"),
    ),
    ("fit: data workers negative", FIT + " --data.num_workers -1", 1, ("--data.num_workers", RANGE)),
    ("fit: prefetch workers huge", FIT + " --data.prefetch_workers 100000", 1, ("data.prefetch_workers",)),
    (
        "fit: prefetch workers negative",
        FIT + " --data.prefetch_workers -1",
        1,
        ("--data.prefetch_workers", RANGE),
    ),
    ("fit: batch size zero", FIT + " --data.batch_size 0", 1, ("--data.batch_size", RANGE)),
    ("fit: batch size negative", FIT + " --data.batch_size -8", 1, ("--data.batch_size", RANGE)),
    ("fit: data seed negative", FIT + " --data.seed -1", 1, ("--data.seed", RANGE)),
    ("fit: data seed huge", FIT + " --data.seed 99999999999", 1, ("data.seed", RANGE)),
    ("fit: cache negative", FIT + " --data.cache_mb -1", 1, ("--data.cache_mb", RANGE)),
    ("fit: k zero", FIT + " --data.k 0", 1, ("--data.k", RANGE)),
    ("fit: k not a number", FIT + " --data.k five", 1, ("--data.k", "five")),
    (
        "fit: member sampling unknown",
        FIT + " --data.member_sampling all",
        1,
        ("--data.member_sampling", "'all'"),
    ),
    ("fit: unknown lead", FIT + " --data.target_leads 72", 1, ("72",)),
    ("fit: lead not a lead", FIT + " --data.input_leads [0,xyz]", 1, ("xyz",)),
    ("fit: negative lead", FIT + " --data.input_leads [-24,0]", 1, ("negative",)),
    ("fit: unknown variable", FIT + " --data.variables [z,q]", 1, ("'q'",)),
    ("fit: variable repeated", FIT + " --data.variables [z,z]", 1, ("variables ['z', 'z'] repeats z",)),
    ("fit: no variables", FIT + " --data.variables []", 1, ("variables is empty",)),
    ("fit: level repeated", FIT + " --data.levels [500,500]", 1, ("levels [500.0, 500.0] repeats 500.0",)),
    ("fit: period not dates", FIT + " --data.val_period [soon,later]", 1, ("soon",)),
    ("fit: forecast is a folder", FIT + " --data.forecast {dir}", 1, ("is a folder",)),
    ("fit: forecast missing", FIT + " --data.forecast {dir}/nope.nc", 1, ("nope.nc", "does not exist")),
    ("fit: unknown option", FIT + " --data.kk 5", 1, ("unknown option",)),
    ("fit: config missing", "fit --config {dir}/nope.yaml", 1, ("nope.yaml", "does not exist")),
    ("fit: config is a folder", "fit --config {dir}", 1, ("config file",)),
    (
        "validate: width negative",
        "validate --config {smoke} {data} --model.init_args.width -4",
        1,
        ("--model.init_args.width", RANGE),
    ),
    (
        "validate: accelerator gpu",
        "validate --config {smoke} {data} --trainer.accelerator gpu",
        1,
        ("no GPU on this machine",),
    ),
    (
        "test: batch size zero",
        "test --config {smoke} {data} --data.batch_size 0",
        1,
        ("--data.batch_size", RANGE),
    ),
    (
        "test: seed negative",
        "test --config {smoke} {data} --seed_everything -1",
        1,
        ("--seed_everything", RANGE),
    ),
    (
        "predict: data workers huge",
        "predict --config {smoke} {data} --data.num_workers 100000",
        1,
        ("data.num_workers",),
    ),
    (
        "predict: checkpoint missing",
        "predict --config {smoke} {data} --ckpt_path {dir}/no.ckpt",
        1,
        ("no.ckpt", "does not exist"),
    ),
    (
        "predict: checkpoint is a folder",
        "predict --config {smoke} {data} --ckpt_path {dir}",
        1,
        ("checkpoint",),
    ),
    # -- data synth / archive -------------------------------------------------------------------------
    ("data synth: n_lat negative", SYNTH + " --n_lat -3", 1, ("--n_lat", RANGE)),
    ("data synth: n_lon huge", SYNTH + " --n_lon 100000", 1, ("--n_lon", RANGE)),
    ("data synth: one member", SYNTH + " --members 1", 1, ("--members", RANGE)),
    ("data synth: every 0 days", SYNTH + " --every_days 0", 1, ("--every_days", RANGE)),
    ("data synth: storms negative", SYNTH + " --storms_per_year -1", 1, ("--storms_per_year", RANGE)),
    ("data synth: seed negative", SYNTH + " --seed -1", 1, ("--seed", RANGE)),
    ("data synth: start not a date", SYNTH + " --start notadate", 1, ("notadate",)),
    ("data synth: end before start", SYNTH + " --start 2020-01-01 --end 2019-01-01", 1, ("2019-01-01",)),
    ("data synth: negative pressure", SYNTH + " --levels [-5]", 1, ("levels",)),
    ("data synth: no levels", SYNTH + " --levels []", 1, ("level",)),
    ("data synth: leads decreasing", SYNTH + " --leads [48,24]", 1, ("increasing",)),
    ("data synth: lead not a lead", SYNTH + " --leads [xyz]", 1, ("xyz",)),
    ("data synth: lead negative", SYNTH + " --leads [-24]", 1, ("negative",)),
    ("data synth: format unknown", SYNTH + " --format grib", 1, ("--format", "'grib'")),
    ("data synth: zarr format 4", SYNTH + " --zarr_format 4", 1, ("--zarr_format",)),
    ("data synth: grid too large", SYNTH + " --n_lat 2000 --n_lon 2000", 1, ("too large",)),
    ("data synth: stations negative", SYNTH + " --stations -5", 1, ("--stations", RANGE)),
    ("data synth: stations too many", SYNTH + " --stations 200000", 1, ("--stations", RANGE)),
    ("data synth: stations, no surface", SYNTH + " --stations 10", 1, ("stations=10", "--surface true")),
    ("data synth: oracle members negative", SYNTH + " --oracle_members -1", 1, ("--oracle_members", RANGE)),
    ("data synth: oracle members too many", SYNTH + " --oracle_members 1001", 1, ("--oracle_members", RANGE)),
    ("data synth: out_dir missing", "data synth", 1, ("--out_dir",)),
    ("data synth: out_dir is a file", "data synth --out_dir benchmark.md", 1, ("benchmark.md",)),
    ("data synth: out_dir holds a user's files", "data synth --out_dir sibling", 1, ("sibling",)),
    ("data physics: truncation unknown", PHYS + " --truncation T99", 1, ("truncation", "T99")),
    ("data physics: one layer", PHYS + " --layers 1", 1, ("layers", "4 … 32")),
    ("data physics: level below the layers", PHYS + " --levels [1000]", 1, ("levels", "100 … 900")),
    ("data physics: lead not whole hours", PHYS + " --leads [0,90min]", 1, ("whole hours",)),
    ("data physics: one member", PHYS + " --members 1", 1, ("at least 2 members",)),
    ("data physics: no spin-up", PHYS + " --spinup_days 1", 1, ("spinup_days", "at least 2")),
    ("data physics: zero inits", PHYS + " --inits 0", 1, ("--inits", RANGE)),
    ("data physics: start not a date", PHYS + " --start notadate", 1, ("notadate",)),
    ("data physics: stations negative", PHYS + " --stations -5", 1, ("--stations", RANGE)),
    ("data physics: stations too many", PHYS + " --stations 200000", 1, ("--stations", RANGE)),
    ("data physics: out_dir holds a user's files", "data physics --out_dir sibling", 1, ("sibling",)),
    ("data archive: period reversed", ARCHIVE + " --period [2019-01-01,2018-01-01]", 1, ("2018-01-01",)),
    ("data archive: period not dates", ARCHIVE + " --period [bad,2018-01-01]", 1, ("bad",)),
    ("data archive: unknown variable", ARCHIVE + " --variables [nope]", 1, ("'nope'",)),
    ("data archive: name leaves out_dir", ARCHIVE + " --name ../x_{{init}}.nc", 1, ("which leaves out_dir",)),
    ("data archive: name absolute", ARCHIVE + " --name /tmp/x{{init:%Y%m%d%H}}.nc", 1, ("is absolute",)),
    ("data archive: name empty", ARCHIVE + " --name=", 1, ("is empty",)),
    ("data archive: name unknown field", ARCHIVE + " --name x_{{foo}}.nc", 1, ("unknown field 'foo'",)),
    ("data archive: name broken", ARCHIVE + " --name x_{{init", 1, ("cannot be formatted",)),
    ("data archive: name without init", ARCHIVE + " --name x.nc", 1, ("use a field that varies",)),
    (
        "data archive: forecast is a folder",
        "data archive --forecast {dir} --out_dir out",
        1,
        ("is a folder",),
    ),
    (
        "data archive: out_dir is a file",
        "data archive --forecast {fc} --out_dir benchmark.md",
        1,
        ("benchmark.md",),
    ),
    ("data: unknown sub-command", "data shuffle", 1, ("shuffle",)),
    # -- evaluate / report -----------------------------------------------------------------------------
    ("evaluate: k zero", EVAL + " --k 0", 1, ("--k", RANGE)),
    ("evaluate: k negative", EVAL + " --k -1", 1, ("--k", RANGE)),
    ("evaluate: unknown lead", EVAL + " --leads 7", 1, ("7 h",)),
    (
        "evaluate: analysis is a folder",
        "evaluate --forecast {fc} --analysis {dir} --out_dir out",
        1,
        ("is a folder",),
    ),
    ("evaluate: analysis missing", "evaluate --forecast {fc}", 1, ("--analysis",)),
    ("evaluate: k not a number", EVAL + " --k many", 1, ("--k", "many")),
    (
        "evaluate: reader key unknown",
        EVAL + ' --reader {{"bogus":1}}',
        1,
        ("--reader", "bogus", "not an argument"),
    ),
    (
        "evaluate: reader rename not a mapping",
        EVAL + ' --analysis_reader {{"rename":["t","u"]}}',
        1,
        ("--analysis_reader", "rename", "expected dict"),
    ),
    (
        "evaluate: reader renames a missing variable",
        EVAL + ' --reader {{"rename":{{"q":"t"}}}}',
        1,
        ("reader.rename names 'q'",),
    ),
    ("report: lead not a number", REPORT + " --lead_hours soon", 1, ("--lead_hours", "soon")),
    (
        "report: case variable unknown",
        REPORT + " --case_variable q",
        1,
        ("case_variable 'q' is not a variable",),
    ),
    (
        "report: out_dir is a file",
        "report --forecast {fc} --analysis {an} --out_dir benchmark.md",
        1,
        ("benchmark.md",),
    ),
    # -- postprocess ----------------------------------------------------------------------------------
    (
        "postprocess: workers huge",
        PP + " --workers 100000",
        1,
        ("--workers 100000", "more than this machine"),
    ),
    ("postprocess: workers zero", PP + " --workers 0", 1, ("--workers", RANGE)),
    (
        "postprocess: threads huge",
        PP + " --threads_per_worker 100000",
        1,
        ("--threads_per_worker", "more than this machine"),
    ),
    ("postprocess: threads zero", PP + " --threads_per_worker 0", 1, ("--threads_per_worker", RANGE)),
    ("postprocess: cluster unknown", PP + " --cluster bogus", 1, ("--cluster", "'bogus'")),
    ("postprocess: device unknown", PP + " --device tpu", 1, ("--device", "'tpu'")),
    ("postprocess: checkpoint missing", PP + " --cluster none", 1, ("no.ckpt",)),
    ("postprocess: checkpoints missing", "postprocess --forecasts {fc}", 1, ("--checkpoints",)),
    # -- plan-parallel ---------------------------------------------------------------------------------
    ("plan-parallel: devices 1e12", PLAN + " --devices 1e12", 1, ("--devices", "1e12")),
    ("plan-parallel: devices huge", PLAN + " --devices 1000000000000", 1, ("--devices", RANGE)),
    ("plan-parallel: devices zero", PLAN + " --devices 0", 1, ("--devices", RANGE)),
    ("plan-parallel: devices negative", PLAN + " --devices -1", 1, ("--devices", RANGE)),
    ("plan-parallel: width huge", PLAN + " --devices 4 --width 100000000", 1, ("--width", RANGE)),
    ("plan-parallel: width zero", PLAN + " --devices 4 --width 0", 1, ("--width", RANGE)),
    ("plan-parallel: depth huge", PLAN + " --devices 4 --depth 99", 1, ("--depth", RANGE)),
    ("plan-parallel: kernel zero", PLAN + " --devices 4 --kernel_size 0", 1, ("--kernel_size", RANGE)),
    (
        "plan-parallel: n_lat zero",
        "plan-parallel --devices 4 --n_lat 0 --n_lon 32 --n_level 2",
        1,
        ("--n_lat", RANGE),
    ),
    ("plan-parallel: memory negative", PLAN + " --devices 4 --memory_gib -1", 1, ("--memory_gib", RANGE)),
    ("plan-parallel: batch zero", PLAN + " --devices 4 --batch_size 0", 1, ("--batch_size", RANGE)),
    ("plan-parallel: task unknown", PLAN + " --devices 4 --task bogus", 1, ("--task", "'bogus'")),
    ("plan-parallel: devices missing", "plan-parallel", 1, ("--devices",)),
    # -- benchmark (options parsed before any data is made or model trained) --------------------------
    ("benchmark: unknown option", "benchmark --limitless 3", 1, ("unknown option",)),
    ("benchmark: no abbreviations", "benchmark --limit -3", 1, ("unknown option --limit",)),
    (
        "benchmark: batches not a number",
        "benchmark --limit_train_batches many",
        1,
        ("--limit_train_batches",),
    ),
    ("benchmark: emos unknown", "benchmark --emos [regional]", 1, ("--emos",)),
    (
        "benchmark: synth and physics",
        "benchmark --synth.seed 1 --physics.seed 1 --bound false",
        1,
        ("give synth or physics options, not both",),
    ),
    (
        "benchmark: bound with physics",
        "benchmark --physics.seed 1",
        1,
        ("bound: true", "physics testbed has none", "set bound: false"),
    ),
    (
        "benchmark: physics truncation unknown",
        "benchmark --physics.truncation T99 --bound false",
        1,
        ("truncation", "expected one of 'T21'", "T99"),
    ),
    # -- the command line itself ------------------------------------------------------------------------
    ("no command", "", 1, ("give a command",)),
    ("unknown command", "forecast", 1, ("unknown command 'forecast'",)),
    ("quiet and verbose", "-q -v data synth --out_dir out", 1, ("--quiet and --verbose",)),
    ("fit: config empty", "fit --config {dir}/empty.yaml", 1, ("empty.yaml is empty",)),
    (
        "fit: config repeats a key",
        "fit --config {smoke} --config {dir}/repeated.yaml",
        1,
        ("repeated.yaml", "key 'k' is repeated", "line 2"),
    ),
    (
        "evaluate: config repeats a nested key",
        "evaluate --config {dir}/nested.yaml",
        1,
        ("key 'rename' is repeated", "line 3"),
    ),
    ("report: config a list", "report --config {dir}/list.yaml", 1, ("list.yaml holds a list",)),
    # -- a list option that names nothing (it would mean "all") or an item twice -----------------------
    ("evaluate: variables empty", EVAL + " --variables []", 1, ("variables is empty",)),
    ("evaluate: variables repeated", EVAL + " --variables [z,t,z]", 1, ("repeats z",)),
    ("evaluate: levels repeated", EVAL + " --levels [500,500]", 1, ("levels", "repeats 500")),
    ("report: variables empty", REPORT + " --variables []", 1, ("variables is empty",)),
    ("report: levels empty", REPORT + " --levels []", 1, ("levels is empty",)),
    ("data archive: variables empty", ARCHIVE + " --variables []", 1, ("variables is empty",)),
    ("data archive: variables repeated", ARCHIVE + " --variables [t,t]", 1, ("repeats t",)),
    # -- evaluate --observations (station observations) ---------------------------------------------------
    (
        "evaluate: analysis and observations",
        EVAL + " --observations {dir}/obs.csv",
        1,
        ("--analysis", "--observations", "not both"),
    ),
    (
        "evaluate: observations missing",
        "evaluate --forecast {fc} --observations {dir}/nope.csv --out_dir out",
        1,
        ("nope.csv", "does not exist"),
    ),
    (
        "evaluate: observations with spread predictions",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --spread_predictions {fc} --out_dir out",
        1,
        ("--spread_predictions does not apply",),
    ),
    (
        "evaluate: observations with missing_forecast",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --missing_forecast true --out_dir out",
        1,
        ("--missing_forecast does not apply",),
    ),
    (
        "evaluate: observations with members",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --members {fc} --out_dir out",
        1,
        ("--members does not apply",),
    ),
    (
        "evaluate: observations with multivariate",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --multivariate true --out_dir out",
        1,
        ("--multivariate does not apply",),
    ),
    (
        "report: observations with members",
        "report --forecast {fc} --observations {dir}/readme.txt --members {fc} --out_dir out",
        1,
        ("--members does not apply",),
    ),
    ("evaluate: multivariate not a boolean", EVAL + " --multivariate often", 1, ("--multivariate", "often")),
    (
        "evaluate: extraction unknown",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --extraction cubic --out_dir out",
        1,
        ("--extraction", "'cubic'"),
    ),
    (
        "evaluate: lapse rate not a number",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --lapse_rate steep --out_dir out",
        1,
        ("--lapse_rate", "steep"),
    ),
    (
        "evaluate: model height with an analysis",
        EVAL + " --model_height {fc}",
        1,
        ("--model_height applies with --observations only",),
    ),
    (
        "evaluate: extraction with an analysis",
        EVAL + " --extraction bilinear",
        1,
        ("--extraction applies with --observations only",),
    ),
    (
        "evaluate: observations out_dir is a file",
        "evaluate --forecast {fc} --observations {dir}/readme.txt --out_dir benchmark.md",
        1,
        ("benchmark.md",),
    ),
    # -- values at the edge of their type: dates datetime64[ns] cannot hold, seeds numpy refuses, leads ---
    # -- past ten years, names and paths longer than the file system allows -------------------------------
    (
        "data synth: start far before 1677",
        SYNTH + " --start 1600-01-01 --end 1600-02-01",
        1,
        ("--start", "1600-01-01", RANGE, DATES),
    ),
    (
        "data synth: end far after 2262",
        SYNTH + " --start 2262-01-01 --end 2263-02-01",
        1,
        ("--end", "2263-02-01", RANGE, DATES),
    ),
    (
        "data synth: valid times far after 2262",
        SYNTH + " --start 2262-04-01 --end 2262-04-11",
        1,
        ("runs past 2262-04-11",),
    ),
    (
        "data physics: start far before 1677",
        PHYS + " --start 1600-01-01",
        1,
        ("--start", "1600-01-01", RANGE, DATES),
    ),
    ("data physics: run far after 2262", PHYS + " --start 2262-03-01", 1, ("runs past 2262-04-11",)),
    (
        "data archive: period far after 2262",
        ARCHIVE + " --period [2017-01-01,2263-01-01]",
        1,
        ("period", "2263-01-01", RANGE, DATES),
    ),
    (
        "fit: period far before 1677",
        FIT + " --data.val_period [1600-01-01,1600-12-31]",
        1,
        ("val_period", "1600-01-01", RANGE, DATES),
    ),
    (
        "fit: period far after 2262",
        FIT + " --data.test_period [2262-01-01,2300-01-01]",
        1,
        ("test_period", "2300-01-01", RANGE),
    ),
    (
        "benchmark: period far before 1677",
        "benchmark --train_period [1500-01-01,2019-06-30]",
        1,
        ("train_period", "1500-01-01", RANGE),
    ),
    (
        "benchmark: synth start far before 1677",
        "benchmark --synth.start 1600-01-01",
        1,
        ("--synth.start", RANGE, DATES),
    ),
    (
        "benchmark: physics start far after 2262",
        "benchmark --physics.start 2300-01-01 --bound false",
        1,
        ("--physics.start", RANGE, DATES),
    ),
    (
        "evaluate: case window far before 1677",
        EVAL + " --cases {dir}/far_case.yaml",
        1,
        ("window", "1600-01-01", RANGE, DATES),
    ),
    (
        "report: case window far before 1677",
        REPORT + " --cases {dir}/far_case.yaml",
        1,
        ("window", "1600-01-01", RANGE),
    ),
    (
        "data synth: seed 2**64",
        SYNTH + " --seed 18446744073709551616",
        1,
        ("--seed", "18446744073709551616", RANGE, SEEDS),
    ),
    ("data synth: seed 2**32", SYNTH + " --seed 4294967296", 1, ("--seed", RANGE, SEEDS)),
    ("data physics: seed 2**64", PHYS + " --seed 18446744073709551616", 1, ("--seed", RANGE, SEEDS)),
    ("fit: data seed 2**64", FIT + " --data.seed 18446744073709551616", 1, ("--data.seed", RANGE, SEEDS)),
    (
        "fit: seed_everything 2**64",
        FIT + " --seed_everything 18446744073709551616",
        1,
        ("--seed_everything", RANGE, SEEDS),
    ),
    (
        "fit: straggler seed negative",
        FIT
        + ' --trainer.callbacks+ {{"class_path":"ensml.train.stragglers.Stragglers","init_args":{{"seed":-1}}}}',
        1,
        ("seed", RANGE, SEEDS),
    ),
    ("benchmark: seed 2**64", "benchmark --seed 18446744073709551616", 1, ("--seed", RANGE, SEEDS)),
    (
        "benchmark: synth seed 2**64",
        "benchmark --synth.seed 18446744073709551616",
        1,
        ("--synth.", "seed: 18446744073709551616", RANGE, SEEDS),
    ),
    (
        "benchmark: physics seed negative",
        "benchmark --physics.seed -1 --bound false",
        1,
        ("--physics.", "seed: -1", RANGE, SEEDS),
    ),
    (
        "data synth: lead 10**9 hours",
        SYNTH + " --leads [1000000000]",
        1,
        ("lead time 1000000000", RANGE, LEADS),
    ),
    ("data synth: lead 99999 days", SYNTH + " --leads [0,P99999D]", 1, ("P99999D", RANGE, LEADS)),
    ("data physics: lead 10**9 hours", PHYS + " --leads [0,1000000000]", 1, ("1000000000", RANGE, LEADS)),
    (
        "fit: target lead 10**9 hours",
        FIT + " --data.target_leads 1000000000",
        1,
        ("1000000000", RANGE, LEADS),
    ),
    ("evaluate: lead 10**9 hours", EVAL + " --leads 1000000000", 1, ("1000000000", RANGE, LEADS)),
    ("report: lead 10**9 hours", REPORT + " --lead 1000000000", 1, ("1000000000", RANGE, LEADS)),
    (
        "benchmark: synth lead 10**9 hours",
        "benchmark --synth.leads [0,1000000000]",
        1,
        ("1000000000", RANGE, LEADS),
    ),
    (
        "data synth: out_dir name too long",
        "data synth --out_dir out/" + LONG_NAME,
        1,
        ("300 bytes", "NAME_MAX: 255 bytes"),
    ),
    ("data synth: out_dir path too long", "data synth --out_dir " + LONG_PATH, 1, ("PATH_MAX: 4096 bytes",)),
    ("data physics: out_dir name too long", "data physics --out_dir " + LONG_NAME, 1, ("NAME_MAX",)),
    (
        "data archive: out_dir name too long",
        "data archive --forecast {fc} --out_dir " + LONG_NAME,
        1,
        ("NAME_MAX",),
    ),
    (
        "evaluate: out_dir name too long",
        "evaluate --forecast {fc} --analysis {an} --out_dir out/" + LONG_NAME,
        1,
        ("NAME_MAX",),
    ),
    (
        "report: out_dir path too long",
        "report --forecast {fc} --analysis {an} --out_dir " + LONG_PATH,
        1,
        ("PATH_MAX",),
    ),
    ("benchmark: out_dir name too long", "benchmark --out_dir " + LONG_NAME, 1, ("NAME_MAX",)),
]

#: Rows run as the console script in a subprocess: ``-q`` must hide Lightning's notes ("Seed
#: set to", the GPU/TPU lines, the model summary), and the process must exit, not hang.
SUBPROCESS_ROWS: list[Row] = [
    ("-q fit: data workers huge", "-q " + FIT + " --data.num_workers 100000", 1, ("data.num_workers",)),
    ("-q fit: accelerator gpu", "-q " + FIT + " --trainer.accelerator gpu", 1, ("no GPU on this machine",)),
    (
        "-q fit: log folder is a file",
        "-q " + FIT + " --trainer.enable_model_summary true --trainer.logger.init_args.save_dir benchmark.md",
        1,
        ("benchmark.md",),
    ),
    ("plan-parallel: devices 1e12 (process)", PLAN + " --devices 1e12", 1, ("--devices",)),
]


#: Rows that fail today, with the work that fixes them (not run: each would write for a minute).
KNOWN_BUGS: dict[str, str] = {}


def _params(rows: list[Row]) -> list:
    return [
        pytest.param(
            row, id=row[0], marks=[pytest.mark.xfail(run=False, strict=True, reason=KNOWN_BUGS[row[0]])]
        )
        if row[0] in KNOWN_BUGS
        else pytest.param(row, id=row[0])
        for row in rows
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", _params(ROWS))
def test_bad_option_is_one_line_and_harmless(
    row: Row,
    inputs: dict[str, str],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    run_row(row, inputs, tmp_path, monkeypatch, capsys)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", SUBPROCESS_ROWS, ids=[row[0] for row in SUBPROCESS_ROWS])
@pytest.mark.slow  # a Python process per row
def test_bad_option_in_a_process(
    row: Row,
    inputs: dict[str, str],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    sandbox(tmp_path)
    roots = (tmp_path, Path(inputs["dir"]), Path(inputs["inputs"]))
    before = hashes(*roots)
    # stdout and stderr come merged in one pipe: nothing but the one line (warnings are off there)
    done = run_cli(row_args(row, inputs), tmp_path, timeout=110)
    err = "\n".join(
        line for line in done.stdout.splitlines() if "Warning" not in line and "warn(" not in line
    )
    check(row, done.returncode, err, before, hashes(*roots))
    for note in ("Seed set to", "GPU available", "TPU available", "Total params", "| Name"):
        assert note not in done.stdout, f"{row[0]}: {note!r} printed under -q"


def test_the_table_covers_every_verb_with_80_rows() -> None:
    verbs = {row[0].split(":")[0].removeprefix("-q ") for row in ROWS + SUBPROCESS_ROWS if ":" in row[0]}
    assert len(ROWS) + len(SUBPROCESS_ROWS) >= 80
    expected = {"fit", "validate", "test", "predict", "evaluate", "report", "postprocess", "plan-parallel"}
    assert expected | {"data synth", "data archive", "benchmark"} <= verbs, verbs
    assert sys.executable
