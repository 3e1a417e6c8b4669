"""The heading of ``summary.md``: which runs it reads, what varied between them, what they
held the same and which configuration the paired differences are taken against (a
``summary.md`` read on its own named none of these: precision-sweep review)."""

from collections.abc import Sequence

from dlrm_exp.record.compare import ConfigStats, has_repeats
from dlrm_exp.record.runs import SEED, RunRecord, override_spread


def heading_lines(
    runs: Sequence[RunRecord], stats: Sequence[ConfigStats] = (), baseline: str | None = None
) -> list[str]:
    """The Markdown lines above the summary table of ``runs``: a title, the runs'
    configurations, seeds and folders (absolute), each override that varied between the runs
    with its values in first-seen order, those every run shared, and, where the statistics
    pair differences (``stats`` with repeats), their baseline (``baseline``: the
    ``--baseline`` it was chosen by; None: the first configuration with a completed run)."""
    folders = ", ".join(dict.fromkeys(f"`{run.path.parent.resolve()}`" for run in runs))
    seeds = ", ".join(str(seed) for seed in sorted({run.seed for run in runs}))
    configs = len({run.config_id for run in runs})
    # (what was swept in one of two sweeps reported together but fixed in the other varies:
    # both called it swept or fixed: diff review)
    varied, same = override_spread([run.overrides for run in runs], leave_out=[SEED])
    lines = [
        "# Summary of runs",
        "",
        f"- {len(runs)} run(s) of {configs} configuration(s), seed(s) {seeds}, in {folders}.",
    ]
    if varied:
        listed = "; ".join(f"`{k}` = {', '.join(f'`{v}`' for v in vs)}" for k, vs in varied.items())
        lines.append(f"- Varied: {listed}.")
    shared = " ".join(f"{k}={v}" for k, v in same.items())
    lines.append(f"- The same in every run: `{shared}`." if shared else "- No other override.")
    if has_repeats(stats) and len(stats) > 1:
        how = (
            f"chosen with `--baseline {baseline}`"
            if baseline
            else "the first configuration with a completed run; `python -m dlrm_exp.report "
            "<folder> --baseline KEY=VALUE` picks another"
        )
        lines.append(f"- Paired differences are taken against `{stats[0].config}` ({how}).")
    return lines
