"""A setting of a fixed set of values given another: one line naming what it takes and the
closest (Hydra's own error suggested nothing; a per-table sharding type listed from_file)."""

import pytest

from dlrm_exp.config import Config
from dlrm_exp.config.enum_values import check_enum_values, enum_fields
from dlrm_exp.config.model import EmbeddingDataType
from dlrm_exp.config.sharding import ShardingStrategy
from dlrm_exp.errors import ConfigError


def test_the_enum_fields_of_the_schema():
    fields = enum_fields(Config)
    assert fields["model.embedding_data_type"] is EmbeddingDataType
    assert fields["sharding.per_table_sharding_type"] is ShardingStrategy  # a map of them
    assert "train.batch_size" not in fields


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("mode=evalute", "mode=evalute: mode takes train, verify, preprocess, plan, evaluate, "
         "predict, export, schema, not evalute: did you mean evaluate?"),
        ("model.embedding_data_type=FP16", "takes fp32, fp16, bf16, not FP16: did you mean fp16?"),
        ("+sharding.per_table_sharding_type.t_cat_0=row_wsie",
         "t_cat_0 takes auto, table_wise, row_wise, column_wise, table_row_wise, "
         "table_column_wise, grid_shard, data_parallel, not row_wsie: did you mean row_wise?"),
        ("qcomms.forward_precision=fp16,fp61", "not fp61: did you mean fp16?"),  # a sweep's
        ("qcomms.backward_precision='bf61'", "not bf61: did you mean bf16?"),  # quoted
        ("sharding.sharding_type=xyz", "not xyz\n"),  # nothing close: no guess
    ],
)  # fmt: skip
def test_a_value_the_setting_does_not_take_names_those_it_does(override, said):
    with pytest.raises(ConfigError) as refused:
        check_enum_values([override], Config)
    assert said in f"{refused.value}\n"


def test_values_the_setting_takes_or_hydra_resolves_pass():
    check_enum_values(
        [
            "sharding.sharding_type=ShardingStrategy.row_wise",  # OmegaConf's own form
            "model.embedding_data_type=${oc.env:TABLE_DTYPE,fp16}",  # resolved later
            "+sharding.per_table_sharding_type.t_cat_0=from_file",  # refused with its reason
            "~sharding.sharding_type",
            "mode=choice(train,plan)",
            "train.batch_size=64",
        ],
        Config,
    )


def test_the_command_line_refuses_it_in_one_line(cli_here):
    result = cli_here(["mode=plan", "sharding.sharding_type=row_wsie"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith("not row_wsie: did you mean row_wise?")
