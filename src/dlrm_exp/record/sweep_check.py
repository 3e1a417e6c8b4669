"""Every job of a ``-m`` sweep checked before the first one starts.

Hydra's ``BasicSweeper`` composes each job's config before launching (a value of the wrong
type fails there), but the checks of :class:`~dlrm_exp.config.root.Config` ran only when a
job started: ``-m train.batch_size=64,-1`` trained job 0, then refused job 1 (on a real
sweep, hours in; review). :class:`SweepCheck`, a Hydra callback of conf/config.yaml, builds
every job's config at the start of the multirun, as each job would build it
(:func:`dlrm_exp.config.checks.sweeping`: a key that another job of the sweep reads is not
refused), and names the jobs that will be refused before any starts. Sweepers other than
Hydra's basic one (Optuna's intervals) choose their jobs as they go: not checked.
"""

import logging
from collections.abc import Callable, Sequence
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from dlrm_exp.config.build import MissingValueError, build_config
from dlrm_exp.errors import UserError
from dlrm_exp.record.runs import override_texts, sweep_values, typed_params, typed_task
from dlrm_exp.util.text import first_few

log = logging.getLogger(__name__)

#: The sweeper whose jobs are the product of the swept values (Hydra's default).
_BASIC = f"{BasicSweeper.__module__}.{BasicSweeper.__qualname__}"


class SweepCheck(Callback):
    """Hydra callback: at the start of a multirun of the basic sweeper, :func:`refused_jobs`
    of the jobs it will launch (its ``params`` and the command line's overrides, as it splits
    them), said in one warning before the first starts. The sweep still runs them: a refused
    combination (``qcomms=int8`` with ``sharding=rowwise``) records ``status: failed`` and
    the sweep goes on, by design; the warning comes before hours of other jobs instead of
    after them, and Ctrl-C stops the sweep."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Warn of the jobs whose config is refused (:func:`refused_jobs`)."""
        sweeper = config.hydra.sweeper
        if sweeper.get("_target_") != _BASIC or not GlobalHydra.instance().is_initialized():
            return
        loader = GlobalHydra.instance().config_loader()
        typed = typed_params(config.hydra)  # as typed: ${...} left alone
        params = override_texts(typed)
        task = typed_task(config.hydra)
        try:
            parsed = OverridesParser.create(config_loader=loader).parse_overrides([*params, *task])
            jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
        except HydraException:  # the sweeper says it, once (it was said twice: review)
            return
        values = sweep_values(task, typed)  # as each job reads them
        compose = lambda job: loader.load_sweep_config(config, list(job))  # noqa: E731
        refused = refused_jobs(compose, jobs, values)
        if refused:
            log.warning(
                "%d of the %d jobs of this sweep will be refused (each records status failed, "
                "the others run; Ctrl-C stops the sweep): %s",
                len(refused),
                len(jobs),
                first_few(refused, 3),
            )


def refused_jobs(
    compose: Callable[[Sequence[str]], DictConfig],
    jobs: Sequence[Sequence[str]],
    values: dict[str, list[str]],
) -> list[str]:
    """Build each job's :class:`Config` from ``compose(job overrides)`` (a config with its
    ``hydra`` node) as the job would, inside :func:`sweeping` ``values``; the warnings that
    building logs are left to the jobs themselves. Returns ``job <n> (<its swept overrides>):
    <reason>`` for each job refused."""
    swept = set(values)
    quiet = logging.getLogger("dlrm_exp")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    refused = []
    try:
        for number, job in enumerate(jobs):
            try:
                _build(compose(job), values)
            except HydraException:  # a missing option: the sweeper says it, once
                return []
            except (UserError, OmegaConfBaseException) as err:
                named = [o for o in job if o.split("=", 1)[0].lstrip("+~") in swept] or job
                refused.append(f"job {number} ({', '.join(named)}): {err}")
    finally:
        quiet.setLevel(level)
    return refused


def _build(raw: DictConfig, values: dict[str, list[str]]) -> None:
    """Build the job's :class:`Config` as the entry point's task does
    (:func:`~dlrm_exp.config.build.build_config`), with its Hydra config set as Hydra sets it
    for the job: a ``${hydra:runtime.cwd}`` in a value resolved nowhere, and every job was
    said to be refused (review)."""
    hydra_config = HydraConfig.instance()
    before = hydra_config.cfg
    hydra_config.set_config(raw)
    try:
        with open_dict(raw):
            raw.pop("hydra", None)
        build_config(raw, values)
    except MissingValueError:  # the job names the key when it starts, as a run does
        pass
    finally:
        hydra_config.cfg = before
