"""Keys the schema does not have are refused with the closest known key (also when appended
with +), a missing mandatory value names its key, and --help lists the modes and the real
options of every group (no schema entries)."""

import re

import pytest

from conftest import GROUPS, REPO, compose_cfg, compose_raw
from dlrm_exp.config import Config, Mode
from dlrm_exp.config.keys import check_composed_keys, check_override_keys, suggest
from dlrm_exp.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("train.lr", "optimizer.learning_rate"),
        ("model.embeding_dim", "model.embedding_dim"),
        ("train.bach_size", "train.batch_size"),
        ("hardware.nproc", "hardware.nproc_per_node"),
    ],
)
def test_the_closest_known_key_is_suggested(key, expected):
    known = {"optimizer.learning_rate", "model.embedding_dim", "train.batch_size",
             "hardware.nproc_per_node", "train.epochs"}  # fmt: skip
    assert suggest(key, known) == expected


def test_early_stopping_keys_are_suggested_and_the_group_is_no_value():
    """``train.patience`` was answered "did you mean train.pipeline?", and
    ``train.early_stopping=false`` was OmegaConf's five lines on EarlyStopping (tuning
    review); Hydra's ``{...}`` form of a group still passes."""
    with pytest.raises(ConfigError, match=r"did you mean train.early_stopping.patience\?"):
        check_override_keys(["train.patience=2"], Config)
    for value in ("false", "null"):
        with pytest.raises(ConfigError, match=rf"train.early_stopping={value}: train.early_"
                           r"stopping is a group of settings, not a value: set one of its "
                           r"keys \(train.early_stopping.min_delta, "):  # fmt: skip
            check_override_keys([f"train.early_stopping={value}"], Config)
    check_override_keys(["train.early_stopping={patience:3}"], Config)
    # a sweep among such values (it was refused: diff review)
    check_override_keys(["train.early_stopping=choice({patience:2},{patience:3})"], Config)
    assert compose_cfg(["train.early_stopping={patience:3}"]).train.early_stopping.patience == 3


def test_a_misspelt_group_with_one_of_its_options_is_named_as_that_choice():
    """``modle=tiny`` was answered "did you mean mode?" (the closest key), which cannot take
    ``tiny``; a group close to the key that has the option is the hint."""
    with pytest.raises(ConfigError, match=r"unknown config key modle: did you mean model=tiny\?"):
        check_override_keys(["modle=tiny"], Config)
    with pytest.raises(ConfigError, match=r"did you mean sharding=rowwise\?"):
        check_override_keys(["shardin=rowwise"], Config)
    with pytest.raises(ConfigError, match=r"modle: did you mean mode\?"):  # no such option
        check_override_keys(["modle=no_such_option"], Config)


def test_an_appended_key_is_refused_after_compose():
    with pytest.raises(ConfigError, match="unknown config key train.lr: did you mean optimizer"):
        check_composed_keys(compose_raw(["+train.lr=0.1"]), Config)
    with pytest.raises(ConfigError, match="unknown config key data.nope"):
        check_composed_keys(compose_raw(["++data.nope=1"]), Config)
    # a key of another data option: named as such, not suggested as its own fix
    other_option = r"data.path does not apply to the chosen data option \(synthetic: Synthetic"
    with pytest.raises(ConfigError, match=other_option):
        check_composed_keys(compose_raw(["+data.path=foo"]), Config)
    # a field appended to a typed list item (what Hydra's own error suggests for a typo)
    item = ["data=criteo_tsv", "data.path=x", "+data.schema.dense.0.log1pp=false"]
    with pytest.raises(ConfigError, match=r"data.schema.dense.0.log1pp: did you mean .*0.log1p\?"):
        check_composed_keys(compose_raw(item), Config)
    check_composed_keys(compose_raw([*item[:2], "data.schema.dense.0.log1p=false"]), Config)


def test_a_key_of_another_data_option_is_refused_before_hydra_composes():
    """``data.path=x`` without ``data=criteo_tsv`` met Hydra's own error, whose hint
    (``+data.path``) the composed-key check then refused (docs review)."""
    from dlrm_exp.config.keys import check_data_option_keys
    from dlrm_exp.config.store import DATA_OPTIONS

    def check(*overrides):
        check_data_option_keys(list(overrides), DATA_OPTIONS)

    default = r"data.path does not apply to the chosen data option \(synthetic: Synthetic"
    with pytest.raises(ConfigError, match=default + r".*\(data=criteo_tsv, data=criteo_npy"):
        check("data.path=x", "mode=plan")
    with pytest.raises(ConfigError, match=r"data.schema.label .*\(criteo_npy: .*data=parquet\)"):
        check("data=criteo_npy", "data.schema.label=y")
    check("data=criteo_tsv", "data.path=x", "data.schema.sparse.C1.id_policy=hash")
    # a schema choice on synthetic data: Hydra's hint (+data/schema=criteo) failed next
    with pytest.raises(ConfigError, match=r"data/schema=criteo does not apply .*synthetic"):
        check("data/schema=criteo")
    check("data=parquet", "data/schema=criteo", "data.path=x")
    check("data.num_train_samples=8", "data.nope=1")  # unknown everywhere: the other check's
    check("experiment=dlrm_main_mlperf", "data.path=x")  # the experiment may choose the data
    check("data=criteo_tsv,parquet", "data.path=x")  # a sweep over data: each job composes
    check("hydra.sweeper.params.data=criteo_tsv,parquet", "data.path=x")  # so does the sweeper's
    # model keys a Parquet schema decides were replaced without a word (configuration review)
    unread = r"model.num_dense_features is not read with data=parquet: its feature schema"
    with pytest.raises(ConfigError, match=unread):
        check("data=parquet", "data/schema=criteo", "model.num_dense_features=5")
    with pytest.raises(ConfigError, match=r"model.num_embeddings_per_feature is not read with"):
        check("data=parquet", "model.num_embeddings_per_feature=[10,10]")
    check("data=criteo_tsv", "data.path=x", "model.num_embeddings_per_feature=[10,10]")  # reads
    # the data option the chosen presets choose (they were skipped, and Hydra's advice to
    # add + was then refused naming a class: configuration review)
    from dlrm_exp.config.conf_tree import conf_dir
    from dlrm_exp.config.config_files import chosen_files, preset_choice

    def preset_data(*args):
        return preset_choice(chosen_files(list(args), [conf_dir()]), "data")

    assert preset_data("experiment=mlperf_dcnv2") == "criteo_multihot"
    assert preset_data("experiment=fast") is None  # (chooses no data: the default's)
    assert preset_data("-m", "experiment=mlperf_dcnv2,dlrm_main_mlperf") is None  # two
    multihot = r"data.val_path does not apply to the chosen data option \(criteo_multihot: "
    with pytest.raises(ConfigError, match=multihot + r".*\(data=criteo_tsv, data=parquet\)"):
        check_data_option_keys(["experiment=mlperf_dcnv2", "data.val_path=x"], DATA_OPTIONS,
                               preset_data("experiment=mlperf_dcnv2"))  # fmt: skip
    with pytest.raises(ConfigError, match=multihot + r".*\(data=criteo_tsv, data=parquet\)"):
        check_composed_keys(compose_raw(["experiment=mlperf_dcnv2", "+data.val_path=x"]), Config)


def test_a_presets_data_keys_another_data_option_lacks_are_refused_before_hydra_composes():
    """``experiment=dlrm_main_mlperf data=criteo_tsv`` (the preset sets data.mmap_mode for its
    own criteo_npy) was Hydra's seven-line ConfigKeyError (presets review)."""
    from dlrm_exp.config.conf_tree import conf_dir
    from dlrm_exp.config.config_files import check_preset_data_keys, chosen_files
    from dlrm_exp.config.store import DATA_OPTIONS

    def check(*args, sweep=True):
        files = chosen_files(list(args), [conf_dir()])
        check_preset_data_keys(list(args), files, DATA_OPTIONS, sweep)

    said = (r"experiment=dlrm_main_mlperf's data.mmap_mode does not apply to the chosen data "
            r"option \(criteo_tsv: CriteoTsvDataConfig\): choose one that has it "
            r"\(data=criteo_npy, data=criteo_multihot\)")  # fmt: skip
    with pytest.raises(ConfigError, match=said):
        check("experiment=dlrm_main_mlperf", "data=criteo_tsv")
    with pytest.raises(ConfigError, match=r"mlperf_dcnv2's data.max_lookup_gib does not apply"):
        check("experiment=mlperf_dcnv2", "data=criteo_multihot,criteo_npy")  # each of a sweep's
    with pytest.raises(ConfigError, match=r"precision_sweep's data.num_train_samples does not"):
        check("experiment=precision_sweep", "+hydra.sweeper.params.data=criteo_tsv")  # (review)
    with pytest.raises(ConfigError, match=r"precision_sweep's data.num_train_samples does not"):
        check("experiment=precision_sweep", '+hydra.sweeper.params.data="synthetic,criteo_tsv"')
        # (quoted, the sweeper reads it as a sweep: it was one unknown option: review)
    with pytest.raises(ConfigError, match=r"dlrm_main_mlperf's data.mmap_mode does not apply"):
        check("experiment=dlrm_main_mlperf", "data=choice(criteo_tsv,criteo_npy)")  # (review)
    check("experiment=dlrm_main_mlperf", "data=glob(crit*)")  # left to Hydra (it raised: review)
    with pytest.raises(ConfigError, match=r"dlrm_main_mlperf's data.mmap_mode does not apply"):
        check("experiment=choice(dlrm_main_mlperf,fast)", "data=criteo_tsv")  # (review)
    with pytest.raises(ConfigError, match=r"dlrm_main_mlperf's data.mmap_mode does not apply"):
        check("experiment='dlrm_main_mlperf'", "data='criteo_tsv'")  # quoted (review)
    # a single run ignores the sweeper's params (it was refused: diff review)
    check("experiment=precision_sweep", "+hydra.sweeper.params.data=criteo_tsv", sweep=False)
    check("experiment=dlrm_main_mlperf", "data=criteo_npy")  # its own option
    check("experiment=dlrm_main_mlperf")
    check("experiment=fast", "data=criteo_tsv")  # sets no data key


def test_known_keys_and_open_maps_pass():
    raw = compose_raw(
        ["+sharding.per_table_sharding_type.t_cat_0=row_wise", "experiment=mlperf_dcnv2"]
    )
    check_composed_keys(raw, Config)
    check_override_keys(
        ["model=mlperf", "train.batch_size=8", "hydra.run.dir=x", "hydra/launcher=local",
         "~seed", "sharding.per_table_compute_kernel.t_cat_1=dense", "job"],
        Config,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="unknown config key opt.lr"):
        check_override_keys(["seed=1", "opt.lr=3"], Config)
    with pytest.raises(ConfigError, match=r"the override '=256' names no key"):  # not a blank
        check_override_keys(["=256"], Config)


def test_a_schema_features_keys_are_checked_though_its_feature_names_are_free():
    """``data.schema.sparse`` maps free feature names to ``SparseFeature`` values: a misspelt
    field of a feature composed and was dropped (its id_policy stayed the default)."""
    tsv = ["data=criteo_tsv", "data.path=x"]
    typo = r"unknown config key data.schema.sparse.cat_0.id_polcy: did you mean .*cat_0.id_policy"
    with pytest.raises(ConfigError, match=typo):
        check_composed_keys(
            compose_raw([*tsv, "+data.schema.sparse.cat_0.id_polcy=strict"]), Config
        )
    with pytest.raises(ConfigError, match=typo):
        check_override_keys(["data.schema.sparse.cat_0.id_polcy=strict"], Config)
    check_composed_keys(compose_raw([*tsv, "data.schema.sparse.cat_0.id_policy=strict"]), Config)
    check_override_keys(["data.schema.sparse.cat_0.id_policy=strict"], Config)
    # an item of a list by its index, as docs/data.md writes it (its item checks its own keys)
    check_override_keys(["data.schema.dense.2.log1p=false"], Config)
    with pytest.raises(ConfigError, match="unknown config key data.schema.dens.2.log1p"):
        check_override_keys(["data.schema.dens.2.log1p=false"], Config)


def test_cli_refuses_unknown_keys_with_a_suggestion_and_names_a_missing_value(tmp_path, cli_here):
    for override in ("train.lr=0.1", "+train.lr=0.1"):
        result = cli_here([override, f"hydra.run.dir={tmp_path}"])
        assert result.returncode == 1, override
        assert result.stderr.strip() == (
            "Error: unknown config key train.lr: did you mean optimizer.learning_rate?"
        )
    assert not (tmp_path / "metrics.json").exists()
    missing = cli_here(["data=criteo_tsv", f"hydra.run.dir={tmp_path}"])
    assert missing.returncode == 1
    required = "Error: data.path is required: set data.path=<tsv file or folder>"
    assert missing.stderr.strip() == required
    # to evaluate, files of their own for every split scored do without it
    evaluate = ["data=criteo_tsv", "mode=evaluate", "checkpoint=x", "data.val_path=v.tsv"]
    refused = cli_here([*evaluate, f"hydra.run.dir={tmp_path / 'v'}"])
    assert refused.returncode == 1
    assert (  # naming the key still missing (it named both, one given: diff review)
        "data.path is required: set data.path=<tsv file or folder> (or, to score files of "
        "their own, data.test_path=<files>)" in refused.stderr
    ), refused.stderr
    # export reads no rows (its tables come from the data config): the checkpoint is looked
    # for, data.path is not asked for (it was refused for it: own-data review)
    for mode, args in (("evaluate", [*evaluate, "split=val"]),
                       ("export", ["data=criteo_tsv", "mode=export", "checkpoint=x"])):  # fmt: skip
        done = cli_here([*args, f"hydra.run.dir={tmp_path / mode}"])
        assert done.returncode == 1
        assert "data.path" not in done.stderr and "checkpoint" in done.stderr, done.stderr


def test_help_lists_the_modes_and_every_real_option(cli_here):
    result = cli_here(["--help"])
    assert result.returncode == 0
    text = result.stdout
    assert "base_" not in text and not re.search(r"\bschema/", text)  # the stored schemas
    for mode in Mode:
        assert re.search(rf"^  {mode.value} +\w", text, re.M), mode
    for group in (*GROUPS, "experiment"):
        # the group's line and its indented continuation lines
        listed = re.search(rf"^  {group} +(.*(?:\n {{5,}}.*)*)", text, re.M).group(1)
        options = set(re.findall(r"[a-z0-9_]+", listed)) - {"default"}
        assert options == {p.stem for p in (REPO / "conf" / group).glob("*.yaml")}, group
    with pytest.raises(Exception, match="Could not find 'model/base_model'"):
        compose_raw(["model=base_model"])


def test_a_sweeper_or_launcher_without_its_plugin_names_the_extra(monkeypatch, tmp_path):
    """``hydra/sweeper=lr_search`` without the optional extra was Hydra's "Could not load
    'hydra/sweeper/optuna'" and its search path (docs review)."""
    import importlib.util

    from dlrm_exp.cli import check_plugins

    installed: set[str] = set()  # what the stand-in finds

    def find_spec(name, *args):
        if "hydra_plugins" not in installed:  # no plugin at all: the parent is missing too
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")
        return object() if name in installed else None

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    optuna = r'lr_search needs .*pip install -e "\.\[optuna\]"'
    with pytest.raises(ConfigError, match=optuna):  # no plugin installed at all
        check_plugins(["-m", "hydra/sweeper=lr_search", "seed=1"])
    with pytest.raises(ConfigError, match=r'launcher=local needs .*\.\[launchers\]"'):
        check_plugins(["-m", "hydra/launcher=local", "seed=1"])
    installed |= {"hydra_plugins", "hydra_plugins.hydra_submitit_launcher"}
    with pytest.raises(ConfigError, match=optuna):  # another plugin installed
        check_plugins(["-m", "hydra/sweeper=lr_search", "seed=1"])
    check_plugins(["-m", "hydra/launcher=local", "seed=1"])
    check_plugins(["seed=1"])
    # off a Slurm cluster submitit raised "Could not detect srun" as a traceback (and left a
    # sweep folder behind)
    monkeypatch.setenv("PATH", "")
    slurm = r"slurm_gpu submits .* srun is not on .*hydra/launcher=local"
    with pytest.raises(ConfigError, match=slurm):
        check_plugins(["-m", "hydra/launcher=slurm_gpu", "seed=1"])
    check_plugins(["-m", "hydra/launcher=slurm_gpu", "--cfg", "hydra"])  # prints only
    # without -m a launcher or sweeper is not used: the run trained here, its record naming
    # the launcher (launch review)
    from dlrm_exp.cli import _check_launch_choices as check

    with pytest.raises(ConfigError, match=r"hydra/launcher=slurm_gpu runs the jobs of a -m "
                       r"sweep; without -m this command runs here"):  # fmt: skip
        check(["hydra/launcher=slurm_gpu", "seed=1"])
    with pytest.raises(ConfigError, match=r"hydra/sweeper=lr_search runs the jobs of a -m"):
        check(["hydra/sweeper=lr_search", "seed=1"])
    check(["hydra/launcher=slurm_gpu", "--cfg", "hydra"])  # prints only
    check(["hydra/launcher=basic", "seed=1"])  # Hydra's own: runs here anyway
    # a preset or primary config that sets hydra.mode sweeps without -m; one that does not,
    # no more than the command line does (it was let be: diff review)
    own = tmp_path / "own"
    (own / "experiment").mkdir(parents=True)
    (own / "experiment" / "swept.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n"
    )
    check(["-cd", str(own), "experiment=swept", "hydra/launcher=local"])
    with pytest.raises(ConfigError, match=r"hydra/launcher=local runs the jobs of a -m sweep"):
        check(["experiment=fast", "hydra/launcher=local"])
    check(["hydra.mode=MULTIRUN", "hydra/launcher=local"])
    check(["-cn", "mine", "hydra/launcher=local"])  # one's own primary config: let be
    with pytest.raises(ConfigError, match=r"hydra/launcher=local runs every job on this "
                       r"machine, one node: hydra.launcher.nodes=2 needs"):  # fmt: skip
        check(["-m", "hydra/launcher=local", "hydra.launcher.nodes='2'", "seed=1"])
    check(["-m", "hydra/launcher=local", "hydra.launcher.nodes=${hardware.nnodes}"])
    check(["-m", "hydra/launcher=local", "hydra.launcher.nodes=1.0"])
    check(["-m", "hydra/launcher=local", "hydra.launcher.nodes=2", "--cfg", "hydra"])
    with pytest.raises(ConfigError, match=r"submitit_local runs every job on this machine"):
        check(["-m", "hydra/launcher=submitit_local", "hydra.launcher.nodes=2"])


def test_a_sweep_that_asks_to_print_its_config_is_one_line():
    """``-m --cfg job``: Hydra's ValueError ("Only one of --run, --multirun, --cfg ...") was a
    raw traceback (config review)."""
    from dlrm_exp.cli import check_flag_combination

    for flag in (["--cfg", "job"], ["--info"], ["-c", "hydra"]):
        with pytest.raises(ConfigError, match=r"-m runs a sweep, .* prints one config: drop -m"):
            check_flag_combination(["-m", *flag, "seed=0,1"])
    check_flag_combination(["--cfg", "job", "seed=0"])
    check_flag_combination(["-m", "seed=0,1"])


def test_a_schema_feature_is_added_whole_and_the_key_by_key_form_says_so():
    """OmegaConf cannot type ``+data.schema.sparse.new={...}`` (nor ``.new.column=``) as a
    ``SparseFeature`` and failed with "Invalid type assigned: dict is not a subclass of
    SparseFeature": refused before Hydra, naming the merge that adds a typed feature."""
    works = "++data.schema.sparse={new: {column: C27, num_embeddings: 500}}"
    hint = re.escape("'++data.schema.sparse={new: {column: ..., num_embeddings: ...}}'")
    for added in ("+data.schema.sparse.new={column: C27, num_embeddings: 500}",
                  "+data.schema.sparse.new.column=C27"):  # fmt: skip
        with pytest.raises(ConfigError, match=hint):
            check_override_keys([added], Config)
    check_override_keys([works, "++data.schema.sparse.cat_0.table=t_new"], Config)
    cfg = compose_cfg(["data=parquet", "data/schema=criteo", "data.path=x", works])
    assert list(cfg.data.schema.sparse)[-1] == "new"
    assert cfg.data.schema.sparse["new"].id_policy.name == "modulo"  # typed: defaults filled


def test_a_list_of_group_options_is_refused_as_the_sweep_it_was_meant_to_be():
    """``model=[tiny,golden]`` ran golden's 26 x 1,048,576 tables merged over tiny's without a
    word (review)."""
    with pytest.raises(ConfigError, match=re.escape(
        "model=[tiny,golden] merges those model options into one config; to run each, sweep "
        "them: -m model=tiny,golden"
    )):  # fmt: skip
        check_override_keys(["model=[tiny,golden]"], Config)
    check_override_keys(["model=tiny", "model.dense_arch_layer_sizes=[8,4]"], Config)
    check_override_keys(["experiment=[quickstart,fast]"], Config)  # presets stack (review)


def test_shell_completion_and_a_config_dir_pass_the_checks_they_should(tmp_path, cli_here):
    """``-sc install=bash`` was refused as an unknown key ``install``; ``-cd`` (a folder of
    options, not a primary config) turned off the data option check, so Hydra's hint
    (``+data.path``) failed next (extension review)."""
    completion = cli_here(["-sc", "install=bash"])
    assert completion.returncode == 0 and "hydra_bash_completion" in completion.stdout
    refused = cli_here(["-cd", str(tmp_path), "mode=plan", "data.path=x"])
    assert refused.returncode == 1
    assert "data.path does not apply to the chosen data option (synthetic" in refused.stderr


def test_hydra_job_chdir_is_refused(tmp_path, cli_here):
    """Relative paths were read from the start folder by some readers and from the run
    folder by others under ``hydra.job.chdir=true`` (extension review)."""
    refused = cli_here(["mode=plan", "hydra.job.chdir=true", f"hydra.run.dir={tmp_path / 'r'}"])
    assert refused.returncode == 1 and not (tmp_path / "r" / "plan.json").exists()
    assert "Error: hydra.job.chdir=true runs the job inside its run folder" in refused.stderr


def test_printing_flags_are_one_at_a_time(cli_here):
    """``-sc`` beside ``-m``, ``--cfg`` or ``--info`` was Hydra's raw traceback (review)."""
    for args, message in [
        (["-m", "-sc", "install=bash"], "Error: -m runs a sweep, -sc prints one config"),
        (["--cfg", "job", "-sc", "install=bash"], "Error: --cfg and --shell-completion each"),
        (["--cfg", "job", "--info"], "Error: --cfg and --info each print something else"),
    ]:
        refused = cli_here(args)
        assert refused.returncode == 1 and refused.stderr.strip().startswith(message), args


def test_a_preset_that_is_a_sweep_is_named_as_one(cli_here, tmp_path):
    """``experiment=precision_sweep`` without ``-m`` ran one job of its settings and dropped
    its 24-job sweep without a word (presets review)."""
    from dlrm_exp.config.conf_tree import conf_dir
    from dlrm_exp.config.config_files import chosen_files, preset_sweeps

    args = ["experiment=precision_sweep"]
    assert preset_sweeps(chosen_files(args, [conf_dir()])) == [("precision_sweep", 4)]
    assert preset_sweeps(chosen_files(["experiment=fast"], [conf_dir()])) == []
    done = cli_here([*args, "mode=plan", f"hydra.run.dir={tmp_path}"])
    assert "note: experiment=precision_sweep is a sweep over 4 key(s)" in done.stderr
    from dlrm_exp.cli import _is_multirun

    for form in ("hydra.mode=MULTIRUN", "++hydra.mode=MULTIRUN", "hydra.mode=RunMode.MULTIRUN"):
        assert _is_multirun([form])  # (Hydra's own forms: no note: diff review)
    assert not _is_multirun(["hydra.mode=RUN"])
    # Hydra prints a config with hydra.mode=MULTIRUN (it was refused as -m: diff review)
    from dlrm_exp.cli import check_flag_combination

    check_flag_combination(["hydra.mode=MULTIRUN", "--cfg", "job"])


def test_sweeper_params_without_a_preset_that_gives_them_are_one_line(cli_here, tmp_path):
    """``hydra.sweeper.params.seed="0,1"`` (with or without +) where no preset gives the basic
    sweeper params ended in a 20-line traceback (diff review); a preset's own param passes,
    and one it lacks needs its +."""
    from dlrm_exp.config.conf_tree import conf_dir
    from dlrm_exp.config.config_files import check_sweeper_param_keys, chosen_files

    def check(*args):
        check_sweeper_param_keys(list(args), chosen_files(list(args), [conf_dir()]))

    for form in ('hydra.sweeper.params.seed="0,1"', '+hydra.sweeper.params.seed="0,1"'):
        with pytest.raises(ConfigError, match=r"which no preset chosen here has: sweep the key "
                           r"itself, -m seed=0,1"):  # fmt: skip
            check(form)
    check("experiment=precision_sweep", 'hydra.sweeper.params.seed="0"')
    with pytest.raises(ConfigError, match=r"has no param lr: add it, \+hydra.sweeper.params.lr"):
        check("experiment=precision_sweep", 'hydra.sweeper.params.lr="0"')
    check("hydra/sweeper=lr_search", "hydra.sweeper.params.x=1")  # its own config gives them
    done = cli_here(["-m", 'hydra.sweeper.params.seed="0,1"', "mode=plan",
                     f"hydra.sweep.dir={tmp_path}"])  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_a_key_the_config_fills_itself_is_refused_naming_what_sets_it():
    """``model.tables`` given on the command line replaced the 26 Criteo tables by one without
    a word, or failed deep in TorchRec (configuration review)."""
    for override in ("model.tables=[]", "+model.tables.0.name=t"):
        with pytest.raises(ConfigError, match=r"model.tables.* is filled by the config, not set: "
                           r"the tables come from the data's feature schema"):  # fmt: skip
            check_override_keys([override], Config)


@pytest.mark.parametrize(
    ("override", "fix"),
    [
        ("experiment=null", "leave it out (or ~experiment) to run without a preset"),
        (
            "experiment=null,fast",
            "leave it out (or ~experiment) to run without a preset; a "
            "sweep with and without one is two commands",
        ),
        ("model=null", "choose one of its options (python -m dlrm_exp --help lists the model"),
        ("data/schema=null", "choose one of its options"),
    ],
)
def test_a_null_group_choice_is_one_line(override, fix):
    """Hydra's own error was a 25-line traceback ("Config group override must be a string or
    a list. Got NoneType"), also for experiment=null, conf/config.yaml's default
    (configuration review)."""
    with pytest.raises(ConfigError, match=re.escape(f"{override}: a config group's choice "
                                                    f"cannot be null: {fix}")):  # fmt: skip
        check_override_keys([override], Config)
    check_override_keys(["~experiment"], Config)


def test_an_interval_under_the_basic_sweeper_is_one_line(cli_here, tmp_path):
    """Hydra's traceback "BasicSweeper does not support sweep type : INTERVAL_SWEEP" left a
    sweep folder holding only its lock (configuration review)."""
    from dlrm_exp.config.keys import check_basic_sweeper_sweeps

    with pytest.raises(
        ConfigError,
        match=r"interval\(\.\.\.\) is a search range, which Hydra's "
        r"basic sweeper cannot sweep: list the values \(-m train.batch_size=a,b,c",
    ):
        check_basic_sweeper_sweeps(["train.batch_size=interval(64,128)"])  # fmt: skip
    check_basic_sweeper_sweeps(["seed=0,1", "seed=range(2)", "seed=choice(0,1)"])
    sweep = ["-m", "mode=plan", "optimizer.learning_rate=interval(0.01,0.1)",
             f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    refused = cli_here(sweep)
    assert refused.returncode == 1 and "hydra/sweeper=lr_search (Optuna" in refused.stderr
    assert not (tmp_path / "sweep").exists()
    # in a preset's own hydra.sweeper.params too (Hydra's traceback: diff review)
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "ranged.yaml").write_text(
        "# @package _global_\nhydra:\n  sweeper:\n    params:\n"
        "      optimizer.learning_rate: interval(0.01,0.5)\n"
    )
    preset = ["-m", "-cd", str(tmp_path), "experiment=ranged", "mode=plan",
              f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    refused = cli_here(preset)
    assert refused.returncode == 1 and refused.stderr.startswith(
        "Error: experiment=ranged's hydra.sweeper.params: optimizer.learning_rate=interval("
    )
    assert "(in its params: optimizer.learning_rate: a,b,c)" in refused.stderr  # (-m key=a,b,c
    # left the preset's interval in place: diff review)
    # a preset that chooses a search sweeper takes it (it was refused for the basic one's
    # sake: diff review); here without the plugin, which is then named
    (tmp_path / "experiment" / "search.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /hydra/sweeper: lr_search\n"
    )
    search = ["-m", "-cd", str(tmp_path), "experiment=search", "mode=plan", sweep[2], sweep[3]]
    refused = cli_here(search)
    assert "interval(...)" not in refused.stderr
    assert _plugin_installed("hydra_plugins.hydra_optuna_sweeper") or (
        "hydra/sweeper=lr_search needs a Hydra plugin that is not installed" in refused.stderr
    )
    # under a primary config of one's own (-cn) that keeps the basic sweeper (Hydra's
    # traceback came back there: diff review)
    (tmp_path / "own.yaml").write_text(
        "defaults:\n  - base_config\n  - model: tiny\n  - sharding: auto\n"
        "  - optimizer: rowwise_adagrad\n  - qcomms: none\n  - data: synthetic\n"
        "  - hardware: cpu\n  - _self_\nmode: plan\n"
    )
    own = ["-m", "-cd", str(tmp_path), "-cn", "own", sweep[2], sweep[3]]
    refused = cli_here(own)
    assert refused.returncode == 1 and "interval(...) is a search range" in refused.stderr
    # its own params, and a preset beside it (diff review)
    (tmp_path / "params.yaml").write_text(
        (tmp_path / "own.yaml").read_text()
        + "hydra:\n  sweeper:\n    params:\n      optimizer.learning_rate: interval(0.1,1)\n"
    )
    (tmp_path / "withexp.yaml").write_text(  # a preset its defaults choose (diff review)
        (tmp_path / "own.yaml")
        .read_text()
        .replace("  - _self_", "  - experiment: ranged\n  - _self_")  # fmt: skip
    )
    optional = (tmp_path / "withexp.yaml").read_text().replace("- experiment:", "- optional exp"
                                                              "eriment:")  # fmt: skip
    (tmp_path / "withopt.yaml").write_text(optional)  # (missed: diff review)
    for args in (["-cn", "params"], ["-cn", "own", "+experiment=ranged"], ["-cn", "withexp"],
                 ["-cn", "withopt"]):  # fmt: skip
        refused = cli_here(["-m", "-cd", str(tmp_path), *args, sweep[3]])
        assert refused.returncode == 1 and "interval(...) is a search range" in refused.stderr
    # the command line's experiment replaces the one its defaults choose (it was refused)
    (tmp_path / "experiment" / "plain.yaml").write_text("# @package _global_\nseed: 3\n")
    replaced = cli_here(["-m", "-cd", str(tmp_path), "-cn", "withexp", "experiment=plain",
                         f"hydra.sweep.dir={tmp_path / 'plain'}"])  # fmt: skip
    assert "interval(...)" not in replaced.stderr


def test_a_group_chosen_with_plus_says_to_drop_it(cli_here, tmp_path):
    """``+experiment=fast`` (Hydra docs' idiom where the primary config has no experiment)
    met "To override a value use 'override experiment: fast'", defaults-list syntax
    (configuration review)."""
    from dlrm_exp.config.keys import check_group_additions

    for override in ("+experiment=fast", "++model=tiny", "+sharding=rowwise,tablewise"):
        plain = override.lstrip("+")
        with pytest.raises(ConfigError, match=re.escape(f"choose it without +, {plain}")):
            check_group_additions([override])
    check_group_additions(["+experiment=[quickstart,fast]"])  # (a list stacks presets)
    # a primary config of one's own whose defaults lack the group takes the + (it was
    # refused, and the form it advised then refused by Hydra: diff review)
    (tmp_path / "nopreset.yaml").write_text(
        "defaults:\n  - base_config\n  - model: tiny\n  - sharding: auto\n"
        "  - optimizer: rowwise_adagrad\n  - qcomms: none\n  - data: synthetic\n"
        "  - hardware: cpu\n  - _self_\nmode: plan\n"
    )
    own = ["-cd", str(tmp_path), "-cn", "nopreset", "+experiment=fast",
           f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    assert cli_here(own).returncode == 0 and (tmp_path / "run" / "plan.txt").is_file()


def _plugin_installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
