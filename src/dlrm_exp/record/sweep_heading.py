"""The heading of ``summary.md``: which runs it reads, what they varied, what they held fixed
and which configuration the paired differences are taken against (a ``summary.md`` read on
its own named none of these: precision-sweep review)."""

from collections.abc import Sequence

from dlrm_exp.record.compare import ConfigStats, has_repeats
from dlrm_exp.record.runs import SEED, RunRecord, override_values, split_overrides


def heading_lines(
    runs: Sequence[RunRecord], stats: Sequence[ConfigStats] = (), baseline: str | None = None
) -> list[str]:
    """The Markdown lines above the summary table of ``runs``: a title, the runs'
    configurations, seeds and folders, each swept key with its values in sweep order, the
    overrides every run shared, and, where the statistics pair differences (``stats`` with
    repeats), their baseline (``baseline``: the ``--baseline`` it was chosen by; None: the
    first configuration with a completed run)."""
    folders = ", ".join(dict.fromkeys(str(run.path.parent) for run in runs))
    seeds = sorted({run.seed for run in runs})
    configs = len({run.config_id for run in runs})
    lines = [
        "# Sweep summary",
        "",
        f"- {len(runs)} run(s) of {configs} configuration(s), seed(s) "
        f"{', '.join(map(str, seeds))}, in {folders}.",
    ]
    swept = swept_values(runs)
    if swept:
        lines.append(
            "- Swept: " + "; ".join(f"`{k}` = {', '.join(v)}" for k, v in swept.items()) + "."
        )
    lines.append(_fixed_line(runs))
    if has_repeats(stats) and len(stats) > 1:
        how = (
            f"chosen with `--baseline {baseline}`"
            if baseline
            else "the first configuration with a completed run; `python -m dlrm_exp.report "
            "<folder> --baseline KEY=VALUE` picks another"
        )
        lines.append(f"- Paired differences are taken against `{stats[0].config}` ({how}).")
    return lines


def swept_values(runs: Sequence[RunRecord]) -> dict[str, list[str]]:
    """``{key: its values as typed, in first-seen order}`` of the keys that make the runs'
    configurations, then ``seed`` where the runs have several."""
    keys = list(dict.fromkeys(key for run in runs for key in run.config_keys))
    values: dict[str, list[str]] = {key: [] for key in keys}
    for run in runs:
        given = override_values(run.overrides)
        for key in keys:
            if key in given and given[key] not in values[key]:
                values[key].append(given[key])
    seeds = list(dict.fromkeys(str(run.seed) for run in runs))
    if len(seeds) > 1:
        values[SEED] = seeds
    return {key: v for key, v in values.items() if v}


def _fixed_line(runs: Sequence[RunRecord]) -> str:
    """The overrides every run shared (neither swept nor the seed), or each configuration's
    where they differ (sweeps reported together)."""
    fixed = [" ".join(split_overrides(f)) for f in dict.fromkeys(run.fixed for run in runs)]
    if fixed == [""]:
        return "- Fixed: no other override (the config groups' defaults)."
    if len(fixed) == 1:
        return f"- Fixed in every run: `{fixed[0]}`."
    listed = "; ".join(f"`{f}`" if f else "none" for f in fixed)
    return f"- Fixed overrides differ between runs: {listed}."
