"""Refusals that tell a later job the data command of a checkpoint's run
(:mod:`dlrm_exp.loop.run_origin`)."""

import json

import pytest
import yaml

from dlrm_exp.errors import CheckpointError
from dlrm_exp.loop.checkpoint import _trainer_state_matching
from dlrm_exp.loop.run_origin import config_dirs, data_command, data_overrides, model_command

OVERRIDES = ["data=parquet", "data/schema=shop", "data.path=logs/*.parquet", "train.batch_size=64",
             "model.embedding_dim=16"]  # fmt: skip


def _run_folder(tmp_path, with_hydra=True):
    """A run folder with a checkpoint of one table ``t_item`` (250 x 16) and, if asked, the
    ``.hydra`` records of a run started with ``--config-dir /own/conf``."""
    checkpoint = tmp_path / "run" / "checkpoints" / "step_50"
    checkpoint.mkdir(parents=True)
    state = {"tables": {"t_item": [250, 16]}, "id_policies": {"item": "strict"}}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    if with_hydra:
        hydra = tmp_path / "run" / ".hydra"
        hydra.mkdir()
        (hydra / "overrides.yaml").write_text(yaml.safe_dump(OVERRIDES))
        sources = [
            {"path": "hydra.conf", "schema": "pkg", "provider": "hydra"},
            {"path": "/work/conf", "schema": "file", "provider": "main"},
            {"path": "/own/conf", "schema": "file", "provider": "command-line"},
            # hydra.searchpath=[file:///searched/conf], the tests' way (diff review)
            {"path": "/searched/conf", "schema": "file",
             "provider": "hydra.searchpath in command-line"},
            # a package on the search path is given back as one (diff review)
            {"path": "my_pkg.conf", "schema": "pkg",
             "provider": "hydra.searchpath in command-line"},
        ]  # fmt: skip
        (hydra / "hydra.yaml").write_text(
            yaml.safe_dump(
                {"hydra": {"runtime": {"config_sources": sources, "choices": {"model": "tiny"}}}}
            )
        )
    return checkpoint


def test_the_runs_data_command_is_read_back(tmp_path):
    checkpoint = _run_folder(tmp_path)
    run = checkpoint.parent.parent
    assert data_overrides(run) == OVERRIDES[:3]
    assert config_dirs(run) == ["/own/conf", "/searched/conf", "pkg://my_pkg.conf"]
    command = (  # (Hydra takes one --config-dir, and a folder)
        "'hydra.searchpath=[file:///own/conf,file:///searched/conf,pkg://my_pkg.conf]' "
        "data=parquet data/schema=shop data.path=logs/*.parquet"
    )
    assert data_command(run) == command
    assert data_command(tmp_path) is None  # no records


def test_a_checkpoint_of_other_tables_names_its_runs_data_command(tmp_path):
    """Scoring a schema run's checkpoint without its data options was refused naming neither
    them nor its --config-dir; a schema's other row counts were sent to model.* keys, which
    do not size its tables (own-data review)."""
    checkpoint = _run_folder(tmp_path)
    run = "(its run's: 'hydra.searchpath=[file:///own/conf,file:///searched/conf,pkg://my_pkg"
    with pytest.raises(CheckpointError, match="another feature schema") as other:
        _trainer_state_matching(checkpoint, {"t_cat_0": [250, 16]})
    assert run in str(other.value)
    with pytest.raises(CheckpointError, match="another model shape") as rows:
        _trainer_state_matching(checkpoint, {"t_item": [260, 16]}, {"item": "strict"})
    assert "data.schema.sparse.<feature>.num_embeddings" in str(rows.value)
    assert run in str(rows.value)
    # the run's model as its folder records it (the choice and its model.* overrides): it
    # said model=... where the folder records model=tiny (after-training review)
    assert "(its run's: model=tiny model.embedding_dim=16; " in str(rows.value)
    assert str(rows.value).count("hydra.searchpath=") == 1  # (the data command's: diff review)
    assert model_command(checkpoint.parent.parent).startswith("'hydra.searchpath=[file:///own")
    bare = _run_folder(tmp_path / "bare", with_hydra=False)  # no records: no command named
    with pytest.raises(CheckpointError) as plain:
        _trainer_state_matching(bare, {"t_cat_0": [250, 16]})
    assert "its run's" not in str(plain.value)


def test_a_managed_collision_checkpoint_without_its_data_config_names_the_runs_data(tmp_path):
    """An export without ``data=`` of a checkpoint whose model maps raw ids itself died in
    DCP's "Missing key in checkpoint state_dict" (diff review)."""
    checkpoint = _run_folder(tmp_path)
    state = {"tables": {"t_item": [250, 16]}, "id_policies": {"item": "managed_collision"}}
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"maps the raw ids of item to rows itself") as err:
        _trainer_state_matching(checkpoint, {"t_item": [250, 16]})
    assert "(its run's: 'hydra.searchpath=[" in str(err.value)
    _trainer_state_matching(checkpoint, {"t_item": [250, 16]}, {"item": "managed_collision"})
