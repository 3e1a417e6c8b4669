"""The user's own config files, read before Hydra: one line naming the file and the place."""

import re
from pathlib import Path

import pytest

from dlrm_exp.config import Config, conf_dir
from dlrm_exp.config.config_files import (
    Chosen,
    check_config_files,
    check_option_file_keys,
    chosen_files,
    config_dirs,
)
from dlrm_exp.errors import ConfigError

SHOP = """label: clicked
dense:
  - {column: price, log1p: true}
sparse:
  user_id: {column: user_id, num_embeddings: 10}
"""


def _schema(folder: Path, name: str, text: str) -> Path:
    path = folder / "data" / "schema" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _chosen_schema(folder: Path, name: str, text: str) -> Chosen:
    return Chosen("data/schema", name, _schema(folder, name, text))


def test_the_files_a_command_line_picks(tmp_path):
    shop, other = _schema(tmp_path, "shop", SHOP), _schema(tmp_path, "other", SHOP)
    (tmp_path / "mine.yaml").write_text("seed: 1\n")
    args = ["-m", "--config-dir", str(tmp_path), "data/schema=shop,other", "data.path=x"]
    assert config_dirs(args) == [tmp_path]
    assert chosen_files(args, [tmp_path]) == [
        Chosen("data/schema", "shop", shop),
        Chosen("data/schema", "other", other),
    ]
    named = [f"hydra.searchpath=[pkg://x,file://{tmp_path}]", "-cn", "mine", "model=tiny"]
    assert config_dirs(named) == [tmp_path]
    assert chosen_files(named, [tmp_path]) == [Chosen("", "mine", tmp_path / "mine.yaml")]
    # (no model/tiny.yaml there)
    quoted = [f"hydra.searchpath=[\"file://{tmp_path}\",'file:///b']"]  # as Hydra's docs write
    assert config_dirs(quoted) == [tmp_path, Path("/b")]  # (left out: diff review)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("label: clicked\ndense:\n  - {column: price, log1p: true\n",
         r"shop.yaml: not valid YAML \(expected ',' or '}', but got '<stream end>' at line 4"),
        ("label: clicked\ndense:\n  price: {log1p: true}\n",
         r"shop.yaml: data.schema.dense is a list of"),
        ("label: clicked\ndense:\n  - {column: price, log1p: yes_please}\n",
         r"shop.yaml: data.schema.dense\[0\].log1p: Value 'yes_please' is not a valid bool"),
        (SHOP.replace("num_embeddings: 10", "num_embeddings: ten"),
         r"data.schema.sparse.user_id.num_embeddings: Value 'ten' (of type 'str' )?could not"),
        ("label: clicked\ndense:\n  - price\n",
         r"data.schema.dense\[0\] is a mapping of DenseColumn.s fields, e.g. \{column: price\}, "
         r"not .price."),
        ("label: clicked\nlabell: x\n", r"data.schema.labell: Key 'labell' not in 'FeatureSchema'"),
        (SHOP.replace("num_embeddings: 10", "num_embedings: 10"),  # (extension review)
         r"user_id.num_embedings: Key 'num_embedings' not in 'SparseFeature': did you mean "
         r"num_embeddings\?"),
    ],
)  # fmt: skip
def test_a_broken_schema_file_is_named_with_its_place(tmp_path, text, refusal):
    """A syntax error was a 100-line traceback through Hydra; a misplaced value was refused
    naming full_key: log1p, or no key (data review)."""
    with pytest.raises(ConfigError, match=refusal):
        check_config_files([_chosen_schema(tmp_path, "shop", text)])


def test_a_good_schema_passes_and_the_cli_says_one_line(tmp_path, cli_here):
    check_config_files([_chosen_schema(tmp_path / "good", "shop", SHOP)])
    _schema(tmp_path, "shop", "label: clicked\ndense: [{column: price\n")
    args = ["--config-dir", str(tmp_path), "data=parquet", "data/schema=shop", "data.path=x"]
    result = cli_here(args)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith(f"Error: {tmp_path}/data/schema/shop.yaml: not valid")


def test_a_schema_composed_from_others_is_left_to_hydra(tmp_path):
    """A schema with a defaults list (extending the shipped one) or a @package header was
    refused for its 'defaults' key, though Hydra composes it (review); its syntax is read."""
    extends = "defaults:\n  - criteo\n  - _self_\nsparse:\n  cat_0: {num_embeddings: 5000}\n"
    check_config_files([_chosen_schema(tmp_path, "mine", extends)])
    packaged = "# @package data.schema\nlabel: clicked\nextra: 1\n"
    check_config_files([_chosen_schema(tmp_path, "pkg", packaged)])
    with pytest.raises(ConfigError, match="not valid YAML"):
        check_config_files([_chosen_schema(tmp_path, "broken", extends + "  cat_1: {num_\n")])


def test_an_override_of_a_feature_the_chosen_schema_lacks_names_the_closest(tmp_path, cli_here):
    """``data.schema.sparse.usr_id.id_policy=strict`` met Hydra's hint to add it with ``+``:
    a phantom feature (extension review); ``data.schema.dense.5.log1p=false`` with 1 dense
    column met "Invalid type assigned: dict is not a subclass of DenseColumn" (own-data
    review)."""
    from dlrm_exp.config.config_files import check_schema_feature_overrides

    shop = _chosen_schema(tmp_path, "shop", SHOP)
    refused = {
        "data.schema.sparse.usr_id.id_policy=strict": (
            r"the schema shop has no feature usr_id \(did you mean user_id\? features: "
            r"user_id\); to add one: '\+\+data.schema.sparse="
        ),
        "data.schema.dense.5.log1p=false": (
            r"the schema shop has 1 dense column\(s\) \(0 to 0: price\); to give others, set "
            r"the whole list: 'data.schema.dense="
        ),
    }
    for override, refusal in refused.items():
        with pytest.raises(ConfigError, match=f"{re.escape(override)}: {refusal}"):
            check_schema_feature_overrides([override], [shop])
    check_schema_feature_overrides(["data.schema.dense.0.log1p=false"], [shop])
    check_schema_feature_overrides(["data.schema.dense=[{column: a}, {column: b}]",
                                    "data.schema.dense.1.log1p=true"], [shop])  # fmt: skip
    check_schema_feature_overrides(["data.schema.sparse.user_id.id_policy=strict"], [shop])
    check_schema_feature_overrides(["+data.schema.sparse.usr_id.column=u"], [shop])  # adds
    for adder in (
        "++data.schema.sparse={usr_id: {column: u, num_embeddings: 4}}",
        "experiment=mine",
    ):  # may add the feature first: Hydra composes it (review)
        check_schema_feature_overrides([adder, "data.schema.sparse.usr_id.id_policy=strict"],
                                       [shop])  # fmt: skip
    args = ["-cd", str(tmp_path), "data=parquet", "data/schema=shop", "data.path=x",
            "data.schema.sparse.usr_id.id_policy=strict"]  # fmt: skip
    refused = cli_here(args)
    assert refused.returncode == 1 and "has no feature usr_id (did you mean" in refused.stderr


def test_every_shipped_option_file_sets_known_keys():
    """The check of one's own option files passes every shipped one (no false refusal)."""
    groups = ("model", "sharding", "optimizer", "qcomms", "hardware", "experiment")
    files = [f for g in groups for f in sorted((conf_dir() / g).glob("*.yaml"))]
    assert len(files) > 30
    check_option_file_keys([Chosen(f.parent.name, f.stem, f) for f in files], Config)


@pytest.mark.parametrize(
    ("path", "text", "refusal"),
    [
        ("model/mine.yaml", "defaults:\n  - tiny\n  - _self_\nembeding_dim: 8\n",
         r"model/mine.yaml: unknown config key model.embeding_dim: did you mean "
         r"model.embedding_dim\?"),
        ("experiment/mine.yaml", "# @package _global_\ntrain:\n  batchsize: 64\n",
         r"experiment/mine.yaml: unknown config key train.batchsize: did you mean "
         r"train.batch_size\?"),
        # a preset in a subfolder (it was taken for a group "sub" and skipped)
        ("experiment/sub/mine.yaml", "# @package _global_\ntrain:\n  batchsize: 64\n",
         r"experiment/sub/mine.yaml: unknown config key train.batchsize: did you mean "
         r"train.batch_size\?"),
        # a key Hydra's override grammar cannot parse (it was skipped)
        ("model/spaced.yaml", "defaults: [tiny, _self_]\nembedding dim: 8\n",
         r"model/spaced.yaml: unknown config key model.embedding dim: did you mean "
         r"model.embedding_dim\?"),
    ],
)  # fmt: skip
def test_a_misspelt_key_in_ones_own_option_file_gets_the_closest(
    tmp_path, cli_here, path, text, refusal
):
    """Hydra refused it in a multi-line ConfigKeyError naming no close key (review)."""
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(text)
    group, option = path.removesuffix(".yaml").split("/", 1)
    result = cli_here(["--config-dir", str(tmp_path), f"{group}={option}", "mode=plan"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert re.search(refusal, line), line


def test_ones_own_option_file_with_known_keys_passes(tmp_path):
    good = tmp_path / "experiment" / "mine.yaml"
    good.parent.mkdir()
    good.write_text(
        "# @package _global_\ndefaults:\n  - override /model: tiny\n"
        "model:\n  embedding_data_type_per_table: {t_cat_0: fp16}\ntrain:\n  batch_size: 64\n"
    )
    check_option_file_keys([Chosen("experiment", "mine", good)], Config)
    # a package under the root, as Hydra composes it (it was checked as _global_.model.*:
    # diff review); a "@package" comment after the content is no header
    sub = tmp_path / "model" / "sub.yaml"
    sub.parent.mkdir()
    sub.write_text("# @package _global_.model\ndefaults: [tiny, _self_]\nembedding_dim: 8\n")
    late = tmp_path / "model" / "late.yaml"
    late.write_text("embedding_dim: 8\n# @package _global_\n")
    check_option_file_keys([Chosen("model", "sub", sub), Chosen("model", "late", late)], Config)


def test_a_schema_no_folder_holds_names_config_dir_and_mode_schema(tmp_path, cli_here):
    """Hydra's own errors for a missing ``data/schema`` named neither ``--config-dir`` nor
    ``mode=schema`` (a second day's run without the folder: review)."""
    from dlrm_exp.config.config_files import check_schema_choice

    folders = [conf_dir(), tmp_path]
    with pytest.raises(ConfigError, match=r"data/schema=shop: no data/schema/shop.yaml in .*--c"):
        check_schema_choice(["data=parquet", "data/schema=shop"], folders)
    with pytest.raises(ConfigError, match="data=parquet reads its files by a feature schema"):
        check_schema_choice(["data=parquet", "data.path=x.parquet"], folders)
    _schema(tmp_path, "shop", SHOP)
    check_schema_choice(["data=parquet", "data/schema=shop"], folders)
    check_schema_choice(["data=parquet", "data/schema=criteo"], [conf_dir()])  # shipped
    check_schema_choice(["data=parquet", "experiment=mine"], folders)  # it may choose one
    # each option of a sweep as Hydra parses it (choice(...) was skipped), quotes stripped
    with pytest.raises(ConfigError, match=r"data/schema=shpo: no data/schema/shpo.yaml"):
        check_schema_choice(["data=parquet", "data/schema=choice(shop,shpo)"], folders)
    check_schema_choice(["data=parquet", "data/schema='shop'", "data/schema=glob(sh*)"], folders)
    with pytest.raises(ConfigError, match="data=parquet reads its files by a feature schema"):
        check_schema_choice(["data='parquet'"], folders)
    done = cli_here(["mode=plan", "data=parquet", "data/schema=shop", "data.path=x.parquet"])
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(
        "Error: data/schema=shop: no data/schema/shop.yaml"
    )
