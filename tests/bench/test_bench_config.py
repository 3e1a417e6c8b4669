"""The benchmarks compose their configs on their own (they run outside Hydra's entry point)."""

from dlrm_exp.bench.quality import MLPERF_ON_THIS_MACHINE
from dlrm_exp.bench.training import compose_config
from dlrm_exp.config import Config, CriteoMultiHotDataConfig


def test_benchmarks_compose_the_default_and_the_mlperf_recipe():
    assert isinstance(compose_config([]), Config)
    mlperf = compose_config(MLPERF_ON_THIS_MACHINE)
    assert isinstance(mlperf.data, CriteoMultiHotDataConfig) and mlperf.data.path is None
    assert mlperf.model.num_embeddings_cap == 100000 and mlperf.train.batch_size == 2048
