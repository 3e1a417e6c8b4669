"""Run folders as records: what each run was asked (its overrides), what it measured
(``metrics.json``), and its name, configuration and seed within a sweep.

A job folder (``outputs/multirun/<date>/<time>/<n>/``) holds ``.hydra/overrides.yaml`` and
``metrics.json``, whose ``status`` is ``completed``, ``failed`` or ``interrupted`` (Ctrl-C or
SIGTERM; both with ``error``); a job that left no ``metrics.json`` (killed outright) is
``missing``. The run name of a job is its value of
every swept key, in command-line order, e.g. ``sharding=rowwise,qcomms=fp16``; its
configuration is the same without ``seed``, which names the repeat. A configuration's identity
(``config_id``, what a comparison matches on) is the canonical form of those overrides: keys
sorted, values normalized (``0.10`` and ``1e-1`` are ``0.1``, ``1.0`` is ``1``), so the order
in which the swept keys were typed does not matter.
"""

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.record.run_record import COMPLETED, FAILED, MISSING, RunMetrics

#: The key whose swept values are repeats of one configuration, not configurations.
SEED = "seed"
#: The configuration name of runs that differ only by seed.
ALL = "(all runs)"
#: The identity of a single run of the defaults (no override) starts with this, then its folder.
DEFAULTS = "(defaults)"


def parse_overrides(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parsed form of command-line overrides (``key=value``, sweeps, ``+key``, ...).
    Each distinct override is parsed once per process: a report of a sweep reads the same few
    overrides of every job many times, and Hydra's grammar takes about 3 ms per parse.

    Raises:
        hydra.errors.OverrideParseException: an override is not Hydra syntax.
    """
    return [_parsed(override) for override in overrides]


@lru_cache(maxsize=4096)
def _parsed(override: str) -> Any:
    (parsed,) = OverridesParser.create().parse_overrides([override])
    return parsed


def result_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` but those that change no result: ``train.progress_bar`` and a
    ``train.resume`` of ``auto`` or null (a path starts from another run's checkpoint: it
    counts, diff review). Two runs that differ in them alone are repeats of one
    configuration, and a sweep rerun that adds one keeps its jobs' records."""
    kept = []
    for text, parsed in zip(overrides, parse_overrides(overrides), strict=True):
        key = parsed.key_or_group
        continued = key == "train.resume" and parsed.value() in ("auto", None)
        if key != "train.progress_bar" and not continued:
            kept.append(text)
    return kept


def override_values(overrides: Sequence[str]) -> dict[str, str]:
    """``{key: value as typed}`` of overrides, e.g. ``["qcomms=fp16"] -> {"qcomms": "fp16"}``;
    a string without Hydra's escapes (``${hydra:runtime.cwd}/x.tsv``, which Hydra writes
    ``$\\{hydra\\:runtime.cwd\\}/x.tsv``: run names and TensorBoard folders showed that)."""
    return {o.key_or_group: _value_text(o) for o in parse_overrides(overrides)}


def _value_text(override: Override) -> str:
    text = override.get_value_element_as_str()
    value = override.value()
    return value if isinstance(value, str) and "\\" in text else text


def parsed_override_values(
    overrides: Sequence[str], keys: Sequence[str] | None = None
) -> dict[str, Any]:
    """``{key: Hydra's parsed value}`` of overrides (only ``keys``, in their order, if given):
    ``["seed=2", "train.lr=0.10"] -> {"seed": 2, "train.lr": 0.1}`` (int, float, bool, None,
    str, list or dict)."""
    parsed = {o.key_or_group: o.value() for o in parse_overrides(overrides)}
    return parsed if keys is None else {k: parsed[k] for k in keys if k in parsed}


def normalized_value(value: Any) -> str:
    """A parsed override value as canonical text: floats by ``repr`` (``0.10``, ``1e-1`` ->
    ``0.1``), whole ones as ints (``1.0`` -> ``1``), booleans and null in lower case, lists
    and dicts as compact sorted JSON."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(_whole(value))
    if isinstance(value, (list, dict)):
        return json.dumps(_whole(value), sort_keys=True, separators=(",", ":"))
    return str(value)


def _whole(value: Any) -> Any:
    """``value`` with whole floats as ints (``1.0``, ``1e0`` -> ``1``), in lists and dicts too:
    a float key takes ``1`` and ``1.0`` alike, so they are one configuration."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


def canonical_overrides(overrides: Sequence[str], keys: Sequence[str] | None = None) -> str:
    """``key=value,...`` of ``overrides`` (only ``keys`` if given) with the keys sorted and
    the values normalized (:func:`normalized_value`: ``0.10``, ``1e-1`` -> ``0.1``; ``1.0``
    -> ``1``), booleans and null in lower case, lists as compact JSON. The identity of a
    configuration, independent of typing order."""
    chosen = parsed_override_values(overrides, keys)
    return ",".join(f"{k}={normalized_value(chosen[k])}" for k in sorted(chosen))


def swept_keys(sweep_overrides: Sequence[str]) -> list[str]:
    """Keys that take several values in a multirun's command-line overrides (``a=x,y``,
    ``range(..)``, ``choice(..)``, globs), in the order given."""
    return [o.key_or_group for o in parse_overrides(sweep_overrides) if o.is_sweep_override()]


def run_name(job_overrides: Sequence[str], swept: Sequence[str]) -> str:
    """``key=value,...`` of the swept keys for one job (all its overrides if none swept)."""
    values = override_values(job_overrides)
    keys = [k for k in swept if k in values] or list(values)
    return ",".join(f"{k}={values[k]}" for k in keys)


def saved_swept_keys(sweep_dir: Path) -> list[str]:
    """The keys a multirun swept, from its ``multirun.yaml``: those swept on the command line
    (:func:`swept_keys`, in order), then those of the sweeper's ``params`` (an experiment
    preset's ``hydra.sweeper.params``) not already named (:func:`saved_sweep_values`'s
    keys). Empty without the file.

    Raises:
        ValueError: the file is not a Hydra multirun record; the message names it.
    """
    return list(saved_sweep_values(sweep_dir))


def saved_sweep_values(sweep_dir: Path) -> dict[str, list[str]]:
    """``{swept key: its values as typed}`` of a multirun, from its ``multirun.yaml``: the
    command line's sweeps, then the sweeper's ``params`` not already named (their keys as
    Hydra parses them: ``+train.profile`` is ``train.profile``). Empty without the file.

    Raises:
        ValueError: the file is not a Hydra multirun record; the message names it.
    """
    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        return {}
    try:
        hydra_cfg = OmegaConf.load(saved).hydra  # type: ignore[union-attr]
        # as typed: a ${hydra:...} or ${oc.env:...} in an override resolved here, where it no
        # longer can, and the sweep lost its summary (review)
        return sweep_values(typed_task(hydra_cfg), typed_params(hydra_cfg))
    except (OmegaConfBaseException, HydraException, AttributeError, TypeError) as err:
        raise ValueError(f"{saved}: not a Hydra multirun.yaml ({err})") from None


def _as_typed(node: Any) -> Any:
    """A config node as plain data, its interpolations as typed (not resolved)."""
    return OmegaConf.to_container(node, resolve=False)


def typed_task(hydra_cfg: Any) -> list[str]:
    """A Hydra config's command-line overrides (``hydra.overrides.task``) as typed: a
    ``${hydra:...}`` or ``${oc.env:...}`` in one is not resolved where it no longer can be."""
    return [str(o) for o in _as_typed(hydra_cfg.overrides.task)]


def typed_params(hydra_cfg: Any) -> dict[str, Any]:
    """A Hydra config's sweeper ``params`` (``hydra.sweeper.params``: ``{key: "a,b"}``) as
    typed; empty in a sweep of the command line's keys only."""
    params = OmegaConf.select(hydra_cfg, "sweeper.params")
    return {} if params is None else _as_typed(params)


def override_texts(params: Mapping[str, Any]) -> list[str]:
    """Sweeper ``params`` as the overrides they stand for, ``["key=a,b", ...]``."""
    return [f"{k}={v}" for k, v in params.items()]


def sweep_values(task: Sequence[str], params: Any) -> dict[str, list[str]]:
    """``{swept key: its values as typed}`` of the command line's overrides ``task``, then
    of the sweeper's ``params`` (``{key: "a,b"}``) the command line does not name: one value
    typed there replaces the params' list, as Hydra's basic sweeper does (``seed=0`` beside
    ``experiment=precision_sweep``'s ``seed: 0,1,2`` ran seed 0 alone, and the sweep was said
    cut short: review).

    Raises:
        HydraException: an override Hydra cannot parse.
    """
    typed = parse_overrides(task)
    values = {o.key_or_group: _values_of(o) for o in typed if o.is_sweep_override()}
    # (as Hydra keys them: ++seed=0 is another key than the params' seed, both applied)
    named = {o.key_or_group for o in typed if o.get_key_element() == o.key_or_group}
    for o in parse_overrides(override_texts(params)):
        if o.key_or_group not in named:
            values.setdefault(o.key_or_group, _values_of(o))
    return values


def _values_of(override: Any) -> list[str]:
    """A parsed override's values as typed (a sweep's each, else its one); none for a sweep
    that has no list of values (an Optuna ``interval(...)``)."""
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    try:
        return list(override.sweep_string_iterator())
    except HydraException:  # "Can only enumerate CHOICE and RANGE sweeps"
        return []


def varying_keys(jobs_overrides: Sequence[Sequence[str]]) -> list[str]:
    """Keys whose value differs between jobs, or that only some jobs have (for sweeps that
    saved no ``multirun.yaml``, such as Optuna's), in first-seen order."""
    return list(override_spread(jobs_overrides)[0])


def override_spread(
    jobs_overrides: Sequence[Sequence[str]], leave_out: Sequence[str] = ()
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The jobs' overrides but the keys ``leave_out``, split into those that varied, ``{key:
    its values as typed, in first-seen order}`` (a key some jobs leave unset counts as
    ``(unset)``), and those every job gave the same value, ``{key: value}``."""
    given = [
        {k: v for k, v in override_values(overrides).items() if k not in leave_out}
        for overrides in jobs_overrides
    ]
    keys = list(dict.fromkeys(key for values in given for key in values))
    spread = {k: list(dict.fromkeys(values.get(k, "(unset)") for values in given)) for k in keys}
    varied = {k: vs for k, vs in spread.items() if len(vs) > 1}
    return varied, {k: vs[0] for k, vs in spread.items() if len(vs) == 1}


@dataclass
class RunRecord:
    """One run folder: its name, overrides and ``metrics.json`` (status ``missing`` if the
    folder has none); ``config`` names its configuration (every swept key but ``seed``) and
    ``seed`` the repeat; ``fixed`` its overrides that were not swept (canonical form);
    ``config_keys`` the override keys its configuration is made of (a single run: every
    override but ``seed``)."""

    path: Path
    name: str
    overrides: list[str]
    metrics: RunMetrics = field(default_factory=lambda: RunMetrics(status=MISSING))
    config: str = ""
    seed: int = 0
    config_id: str = ""
    fixed: str = ""
    config_keys: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """``completed``, ``failed`` or ``missing`` (no ``metrics.json``)."""
        return self.metrics.status

    def matches(self, selector: str) -> bool:
        """Whether this run has every override of ``selector`` (``a=x,b=y``; a list value
        ``a=[1,2]`` stays whole), values compared as parsed (``0.10`` is ``0.1``).

        Raises:
            ValueError: ``selector`` is not ``key=value`` overrides; the message names it.
        """
        parts = split_overrides(selector)
        try:
            wanted = parsed_override_values(parts)
        except HydraException as err:
            raise ValueError(f"--baseline {selector}: not key=value overrides ({err})") from None
        have = parsed_override_values(self.overrides)
        return all(
            k in have and normalized_value(have[k]) == normalized_value(v)
            for k, v in wanted.items()
        )


def split_overrides(text: str) -> list[str]:
    """``a=x,b=[1,2]`` -> ``["a=x", "b=[1,2]"]``: overrides joined by commas, split where the
    next ``key=`` starts (a list value keeps its commas)."""
    return [p for p in re.split(r",(?=[\w.+~/@-]+=)", text) if p]


def recanonical(config_id: str) -> str:
    """A configuration identity as saved (``summary_runs.csv``) in today's canonical form: a
    baseline saved before whole floats were normalized named ``lr=1.0`` what is now ``lr=1``.
    Identities that are no overrides (all runs, the defaults) stay as they are."""
    if config_id == ALL or config_id.startswith(DEFAULTS):
        return config_id
    try:  # (and without the overrides that change no result, as runs are named today: a
        # baseline saved with train.progress_bar=false in its identity paired with no run)
        return canonical_overrides(result_overrides(split_overrides(config_id))) or config_id
    except HydraException:
        return config_id


def job_overrides(run_dir: Path) -> list[str]:
    """The job's command-line overrides (``.hydra/overrides.yaml``; none without it).

    Raises:
        ValueError: the file is not a list of Hydra overrides; the message names it.
    """
    saved = run_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        return []
    try:
        overrides = [str(o) for o in OmegaConf.to_container(OmegaConf.load(saved))]  # type: ignore[union-attr]
        parse_overrides(overrides)
    except (OmegaConfBaseException, HydraException, TypeError) as err:
        raise ValueError(f"{saved}: not a list of Hydra overrides ({err})") from None
    return overrides


def _job_number(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (1 << 30, path.name)


def load_runs(paths: Iterable[Path]) -> list[RunRecord]:
    """Run records of run folders (holding ``.hydra/`` or ``metrics.json``) and of sweep
    folders (holding job folders with ``.hydra/``: every job, by job number); a folder named
    twice (``sweep`` and ``'sweep/[0-9]*'``, overlapping globs) is one run."""
    runs: list[RunRecord] = []
    swept_of: dict[Path, list[str]] = {}  # a sweep's saved keys, read once
    seen: set[Path] = set()

    def unseen(folder: Path) -> bool:  # each folder is read once, however often it is named
        key = folder.resolve()
        fresh = key not in seen
        seen.add(key)
        return fresh

    def saved_keys(sweep: Path) -> list[str]:
        if sweep not in swept_of:
            swept_of[sweep] = saved_swept_keys(sweep)
        return swept_of[sweep]

    for path in paths:
        if not path.is_dir():  # a file among a glob's matches (summary.csv, a plot)
            continue
        jobs = sorted((p for p in path.iterdir() if (p / ".hydra").is_dir()), key=_job_number)
        if jobs:
            overrides = [job_overrides(job) for job in jobs]
            swept = saved_keys(path) or _unsaved_sweep_keys(jobs, overrides)
            runs.extend(
                _record(job, swept, typed)
                for job, typed in zip(jobs, overrides, strict=True)
                if unseen(job)
            )
        elif (path / ".hydra").is_dir() or (path / "metrics.json").is_file():
            # a job folder named on its own (report 'sweep/[0-9]*') is labelled by its
            # sweep's swept keys, as when the sweep folder is named: the same identity
            if unseen(path):
                runs.append(_record(path, saved_keys(path.parent), job_overrides(path)))
    return runs


def named_by_difference(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """``runs`` with the single runs among them (named by every override) named and labelled
    by the overrides that differ between those runs (``config_keys`` and ``config_id`` kept:
    what the statistics and the gate match by): three runs named by all their overrides made
    250-character rows and legends, each repeating what "the same in every run" lists
    (review)."""
    singles = [r for r in runs if r.config_keys and list(r.config_keys) == _keys_but_seed(r)]
    if len(singles) < 2:
        return list(runs)
    # over every run reported: a single run beside a sweep's named like one of its jobs of
    # another configuration (diff review)
    varying = set(override_spread([r.overrides for r in runs])[0])
    renamed = {}
    for run in singles:
        keys = [k for k in run.config_keys if k in varying]
        named = [k for k in override_values(run.overrides) if k in varying]  # seed too
        if keys:
            config, name = run_name(run.overrides, keys), run_name(run.overrides, named)
            renamed[run.path] = replace(run, name=name, config=config)
    out = [renamed.get(run.path, run) for run in runs]
    configs: dict[str, set[str]] = {}
    for run in out:
        configs.setdefault(run.config, set()).add(run.config_id)
    clash = {config for config, ids in configs.items() if len(ids) > 1}
    return [run if new.config in clash else new for run, new in zip(runs, out, strict=True)]


def _keys_but_seed(run: RunRecord) -> list[str]:
    """The keys of a run's overrides that change its result, but the seed (as a single run's
    identity takes them: :func:`_record`)."""
    return [k for k in override_values(result_overrides(run.overrides)) if k != SEED]


def mode_name(config: DictConfig) -> str:
    """The ``mode`` a composed ``config`` runs, as text (``train`` without the key; the
    structured config holds a :class:`~dlrm_exp.config.Mode` enum)."""
    mode = config.get("mode", "train")
    return str(getattr(mode, "value", mode))


def recorded_mode(run_dir: Path) -> str | None:
    """The ``mode`` a run folder's ``.hydra/config.yaml`` ran (``train`` without the key);
    None without the file, or where it cannot be read."""
    return _recorded(run_dir, "mode", "train")


def recorded_checkpoint(run_dir: Path) -> str | None:
    """The ``checkpoint`` a run folder's ``.hydra/config.yaml`` read (evaluate, predict,
    export); None without one, the file, or where it cannot be read."""
    return _recorded(run_dir, "checkpoint", None)


def _recorded(run_dir: Path, key: str, default: str | None) -> str | None:
    """The top-level ``key`` of a run folder's ``.hydra/config.yaml`` as text (``default``
    without the key); None without the file, or where it cannot be read."""
    try:
        value = OmegaConf.load(run_dir / ".hydra" / "config.yaml").get(key, default)
    except (OSError, OmegaConfBaseException, AttributeError):
        return None
    return None if value is None else str(value)


def _unsaved_sweep_keys(jobs: Sequence[Path], overrides: Sequence[Sequence[str]]) -> list[str]:
    """The swept keys of a folder of run folders without a ``multirun.yaml``: the keys that
    vary between its jobs when they are numbered as a sweep's (``0``, ``1``, ...: a sweeper
    that saved none, such as Optuna's); none for single runs side by side
    (``outputs/<date>/<time>``), each then its single run's identity, as when named on its own
    or by a glob (else the same runs had another identity by the folder named)."""
    return varying_keys(overrides) if all(job.name.isdigit() for job in jobs) else []


def _record(run_dir: Path, swept: Sequence[str], overrides: list[str]) -> RunRecord:
    metrics_file = run_dir / "metrics.json"
    metrics = RunMetrics.read(metrics_file) if metrics_file.is_file() else _unrecorded(run_dir)
    name = run_name(overrides, swept) if overrides else run_dir.name
    others = [k for k in swept if k != SEED]
    values = override_values(result_overrides(overrides))
    seed = _seed(run_dir, overrides, metrics)
    if others:
        keys = others
        config = run_name(overrides, others)
        identity = canonical_overrides(overrides, keys)
    elif SEED in swept:  # repeats of one configuration
        keys, config, identity = [], ALL, ALL
    else:  # a single run: every override but the seed (only a seed: a repeat of all runs)
        keys = [k for k in values if k != SEED]
        if keys:
            config = run_name(overrides, keys)
        else:  # the defaults: its folder tells it from others (the gate pairs two, gate.py)
            config = ALL if SEED in values else run_dir.name
        identity = canonical_overrides(overrides, keys) or (
            config if SEED in values else f"{DEFAULTS} {config}"
        )
    # the overrides every job of the sweep shared (neither swept nor the run's identity): what
    # a comparison assumes equal
    fixed = canonical_overrides(
        overrides,
        [k for k in values if k not in {*swept, *keys, SEED}],
    )
    return RunRecord(
        run_dir, name or run_dir.name, overrides, metrics, config, seed, identity, fixed,
        tuple(keys),
    )  # fmt: skip


#: The line a single run refused before it wrote a record leaves in its log (``cli``): its
#: time (Hydra's ``asctime``, local) and the error's first line.
_REFUSAL = re.compile(r"^\[([^]]*)\]\[dlrm_exp\]\[ERROR\] - Error: (.*)$", re.MULTILINE)


def _unrecorded(run_dir: Path) -> RunMetrics:
    """The record of a run folder without ``metrics.json``: a single run refused at its start
    (a typo in ``data.path``, a memory refusal) is ``failed`` with the error its log gives,
    as a sweep's refused job records it (it was listed as ``missing``, as if killed); else
    ``missing``, also where a run started in the folder after the refusal (Hydra appends to
    the log and writes ``.hydra/`` at each start: a later run killed or still running)."""
    try:
        refusals = _REFUSAL.findall((run_dir / "dlrm_exp.log").read_text(errors="replace"))
        started = (run_dir / ".hydra" / "config.yaml").stat().st_mtime
        when = datetime.strptime(refusals[-1][0], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except (OSError, IndexError, ValueError):
        return RunMetrics(status=MISSING)
    if started > when + 1.0:  # (its .hydra is written before it refuses)
        return RunMetrics(status=MISSING)
    return RunMetrics(status=FAILED, error=refusals[-1][1])


def _seed(run_dir: Path, overrides: Sequence[str], metrics: RunMetrics) -> int:
    """The run's seed: as its ``metrics.json`` records it, else its ``seed`` override, else
    the config's default 0.

    Raises:
        ValueError: the override is no integer (``seed=${oc.env:...}``) and the record holds
            no seed (a job that failed, or one written before the field); names the file.
    """
    if metrics.seed is not None:
        return metrics.seed
    typed = parsed_override_values(overrides, [SEED]).get(SEED, 0)
    try:
        return int(typed)
    except (TypeError, ValueError):
        raise ValueError(
            f"{run_dir / '.hydra' / 'overrides.yaml'}: seed={typed} is no integer and the run's "
            "metrics.json records no seed (a failed job, or one written before it did): "
            "the report cannot tell which repeat it is; report it apart or rerun it"
        ) from None


def check_same_fixed(runs: Iterable[RunRecord]) -> None:
    """Refuse runs of one configuration run with other fixed (not swept) overrides, e.g. the
    jobs of ``optimizer=sgd`` of a sweep with ``model=tiny`` and of one with ``model=mlperf``
    reported together: their seeds are not repeats of one measurement.

    Raises:
        ValueError: naming the configuration, both sets of overrides and a run of each.
    """
    seen: dict[str, RunRecord] = {}
    for run in runs:
        first = seen.setdefault(run.config_id, run)
        if first.fixed != run.fixed:
            raise ValueError(
                f"runs of {run.config} were run with other overrides that were not swept "
                f"({_fixed_difference(first, run)}): "
                f"{first.fixed or 'none'} ({first.path}) and {run.fixed or 'none'} ({run.path}); "
                "their seeds are not repeats of one configuration: report them separately (a "
                "--compare-to gate compares two such sets and notes the difference)"
            )


def _fixed_difference(first: RunRecord, other: RunRecord) -> str:
    """The not-swept override keys whose values differ between two runs of one configuration,
    each with both values (``optimizer.learning_rate 0.1 / 0.01``; ``-`` where unset)."""
    differ = override_differences(first.overrides, other.overrides, {*first.config_keys, SEED})
    return differences_text(differ) or "as typed"


def differences_text(differ: Mapping[str, tuple[Any, Any]]) -> str:
    """:func:`override_differences` as text: ``optimizer.learning_rate 0.1 / 0.01, ...``."""
    return ", ".join(f"{k} {a} / {b}" for k, (a, b) in differ.items())


def override_differences(
    first: Sequence[str], other: Sequence[str], skip: Iterable[str] = ()
) -> dict[str, tuple[Any, Any]]:
    """``{key: (its value in first, in other)}`` of the override keys whose results differ
    (:func:`result_overrides`; parsed, :func:`normalized_value`: ``0.10`` is ``1e-1``), in
    key order, but ``skip``'s; the values as typed (``"-"`` where unset: a dropped ``auto``
    was shown as unset: diff review)."""
    a, b = (
        parsed_override_values(result_overrides(first)),
        parsed_override_values(result_overrides(other)),
    )
    typed_a, typed_b = parsed_override_values(first), parsed_override_values(other)
    keys = sorted({*a, *b} - set(skip))
    return {
        k: (typed_a.get(k, "-"), typed_b.get(k, "-"))
        for k in keys
        if (k in a) != (k in b) or (k in a and normalized_value(a[k]) != normalized_value(b[k]))
    }


class _SeededRun(Protocol):
    config_id: str
    seed: int

    @property
    def status(self) -> str: ...


Run = TypeVar("Run", bound=_SeededRun)


def without_superseded(runs: Sequence[Run]) -> list[Run]:
    """``runs`` less those that did not complete where a completed run of the same
    configuration and seed exists (a failed seed run again: the rerun is the measurement; the
    failure counted beside it refused the report as two runs of one seed and failed the
    gate)."""
    done = {(r.config_id, r.seed) for r in runs if r.status == COMPLETED}
    return [r for r in runs if r.status == COMPLETED or (r.config_id, r.seed) not in done]


def check_distinct_seeds(runs: Iterable[RunRecord]) -> None:
    """Refuse two runs of one configuration with the same seed: they would be counted as two
    repeats of what is one measurement.

    Raises:
        ValueError: naming the configuration, the seed and both run folders.
    """
    seen: dict[tuple[str, int], Path] = {}
    for run in runs:
        first = seen.setdefault((run.config_id, run.seed), run.path)
        if first != run.path:
            raise ValueError(
                f"two runs of {run.config} with seed={run.seed}: {first} and {run.path} "
                "(repeats of a configuration need distinct seeds; report them separately)"
            )
