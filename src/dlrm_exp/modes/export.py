"""``mode=export``: a trained (possibly sharded) checkpoint as one unsharded TorchScript model.

``python -m dlrm_exp mode=export checkpoint=PATH export.quantization=none|fp16|int8`` builds
the model on this process with real (unsharded) tables, loads the checkpoint's weights (DCP
gathers the shards of any sharding type and world size), quantizes the tables with TorchRec's
inference path (``quantize_inference_model``: ``QuantEmbeddingBagCollection``), scripts the
whole model (:func:`dlrm_exp.factories.inference.script`) and writes, into the run folder (or
``export.output_dir``):

* ``model.pt``: ``torch.jit.load`` it in any process that has imported ``fbgemm_gpu`` (for
  its embedding operators); dlrm_exp is not needed. Inputs and output:
  :class:`dlrm_exp.factories.inference.InferenceDLRM`.
* ``export.json``: the quantization, table bytes before (fp32) and after, the checkpoint and
  its step, and the input schema (feature names, ids per feature range, dense count, layout).
"""

import time
import zipfile
from dataclasses import replace
from pathlib import Path

import torch

from dlrm_exp.config import Config, EmbeddingDataType, ModelConfig
from dlrm_exp.errors import ConfigError
from dlrm_exp.factories.inference import (
    ANY_ID,
    InferenceDLRM,
    quantize_tables,
    script,
    table_bytes,
)
from dlrm_exp.factories.model import build_model
from dlrm_exp.loop.checkpoint import (
    find_checkpoint,
    load_model_weights,
)
from dlrm_exp.modes.job import Job, ModeResult
from dlrm_exp.modes.setup import (
    on_one_process,
    saved_table_data_types,
    trained_dense_precision,
    warn_managed_collision_ranks,
)
from dlrm_exp.planning.tables import model_inputs, table_shapes
from dlrm_exp.util.files import check_writable, publish_file, write_json_atomic
from dlrm_exp.util.folder_lock import held_run_folder

CPU = torch.device("cpu")


def run(cfg: Config, job: Job) -> ModeResult:
    """``mode=export``: write ``model.pt`` and ``export.json``; print where."""
    record = run_export(cfg, job)
    return ModeResult(summary=summary(record))


def load_trained(cfg: Config, path: Path) -> tuple[torch.nn.Module, dict]:
    """The unsharded DLRM with the weights of checkpoint ``path`` (eval mode) and its
    ``trainer_state.json``.
    Its tables are fp32 whatever ``model.embedding_data_type`` trained (DCP widens fp16
    weights exactly), so the quantization starts from the trained values.

    Raises:
        CheckpointError: missing, partial or unreadable checkpoint, another model shape, or
            other id policies than this job's data config (a managed-collision checkpoint
            without it).
    """
    fp32 = replace(
        cfg.model,
        embedding_data_type=EmbeddingDataType.fp32,
        embedding_data_type_per_table={},
    )
    module = build_model(fp32, dense_device=CPU, table_device=CPU)
    # (the id policies too: a managed-collision checkpoint without its data config is
    # refused by name, not by DCP's missing keys: diff review)
    saved = load_model_weights(
        path, module, table_shapes(cfg.model), cfg.data.id_policies(), inputs=model_inputs(cfg)
    )
    return module.model.eval(), saved


def run_export(cfg: Config, job: Job) -> dict:
    """Export ``cfg.checkpoint``; returns the ``export.json`` record.

    Raises:
        CheckpointError: see :func:`load_trained`.
        ConfigError: the output folder cannot be written, or holds a ``model.pt`` that is no
            earlier export (:func:`_is_export`), which would be replaced.
        RunFolderInUseError: another run exports into ``export.output_dir``.
    """
    started = time.perf_counter()
    on_one_process(cfg)
    out = Path(cfg.export.output_dir).expanduser() if cfg.export.output_dir else job.run_dir
    key = "export.output_dir" if cfg.export.output_dir else "hydra.run.dir"
    check_writable(out, key)
    if (out / "model.pt").exists() and not _is_export(out / "model.pt"):
        raise ConfigError(
            f"{key}: {out / 'model.pt'} is there and is no earlier export of dlrm_exp: it "
            "would be replaced; name another folder"
        )
    with held_run_folder(out, key):  # one export at a time there (model.pt.partial)
        return _export(cfg, out, started)


#: The extra file every artifact carries (TorchScript's ``_extra_files``): what marks it as an
#: export of this package.
EXPORT_MARK = "dlrm_exp_export"


def _is_export(artifact: Path) -> bool:
    """Whether ``artifact`` is an earlier export, which a new one may replace: one with its
    ``export.json`` beside it, or a TorchScript archive (a zip) holding :data:`EXPORT_MARK`
    (a crash between the artifact and its record leaves it without ``export.json``)."""
    if (artifact.parent / "export.json").is_file():
        return True
    try:
        with zipfile.ZipFile(artifact) as archive:
            return any(name.endswith(f"/extra/{EXPORT_MARK}") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _export(cfg: Config, out: Path, started: float) -> dict:
    """:func:`run_export` into the checked folder ``out``."""
    assert cfg.checkpoint is not None  # Config.__post_init__ requires it
    path = find_checkpoint(cfg.checkpoint)
    dlrm, saved = load_trained(cfg, path)
    warn_managed_collision_ranks(saved, cfg, world_size=1)
    tables = table_shapes(cfg.model)
    # the dtypes the checkpoint holds, not the ones the export command repeats (or forgets)
    trained = {
        **cfg.model.table_data_type_of,
        **saved_table_data_types(path),
    }
    quantized = quantize_tables(dlrm, cfg.export.quantization, trained)
    scripted = script(InferenceDLRM(quantized, cfg.model.feature_names, _row_bounds(cfg.model)))
    _save_artifact(scripted, out)
    record = {
        "artifact": str(out / "model.pt"),
        "quantization": cfg.export.quantization.value,
        "trained_table_data_types": sorted({t.value for t in trained.values()}),
        # the artifact computes in fp32 whatever it trained in; null: not recorded (older)
        "trained_dense_precision": trained_dense_precision(saved),
        "checkpoint": str(path),
        "step": int(saved["step"]),
        "table_bytes_fp32": table_bytes(dlrm),
        "table_bytes": table_bytes(quantized),
        "inputs": {
            "dense": f"(B, {cfg.model.num_dense_features}) float32, transformed as in training "
            "(log(1 + max(x, 0)) of Criteo's counts; in general data.schema's log1p columns)",
            "values": "(N,) int64: the table rows of each feature for the B samples, "
            "feature-major (Criteo's int(C, 16) % num_embeddings; in general after "
            "data.schema's id policy, in Python dlrm_exp.data.id_policy.to_rows(ids, policy, "
            "num_embeddings, where); for the managed_tables, the 63-bit hashed raw ids, "
            "which the model maps to rows itself); an id outside [0, num_embeddings) of its "
            "table (of a managed table: below 0) is refused (torch.jit.Error)",
            # with a feature schema, the column each input is read from, in the model's order;
            # a dense one with log1p takes log(1 + max(x, 0)) of it (own-data review: not
            # recorded, so the artifact could not be fed from its record); the checkpoint's
            # where this job gives no schema (an export without data=: after-training review)
            "model_inputs": model_inputs(cfg) or saved.get("inputs"),
            "lengths": f"({len(cfg.model.feature_names)} * B,) int32: ids per (feature, sample), "
            "same order",
            "feature_names": cfg.model.feature_names,
            "table_features": dict(
                zip(cfg.model.table_names, cfg.model.table_features, strict=True)
            ),
            "num_embeddings": [rows for rows, _dim in tables.values()],
            "managed_tables": sorted(cfg.model.managed_tables),
            # as the checkpoint recorded them (null: data without a schema, or a checkpoint
            # written before they were recorded); id_kinds: integer or string ids per hashed
            # feature, as the training data stored them
            "id_policies": saved.get("id_policies"),
            "id_kinds": saved.get("id_kinds"),
            "num_dense_features": cfg.model.num_dense_features,
        },
        "output": "(B,) float32 click probabilities",
        "load": "import torch, fbgemm_gpu; model = torch.jit.load(artifact)",
        "seconds": time.perf_counter() - started,
    }
    write_json_atomic(out / "export.json", record)
    return record


def _row_bounds(model: ModelConfig) -> list[int]:
    """Per sparse feature (``model.feature_names``' order), the rows of its table, which the
    artifact checks each id against (:class:`~dlrm_exp.factories.inference.InferenceDLRM`);
    :data:`~dlrm_exp.factories.inference.ANY_ID` for a managed-collision table's features."""
    return [  # (feature_names is table_features flattened, in table order)
        ANY_ID if name in model.managed_tables else size
        for name, features, size in zip(
            model.table_names, model.table_features, model.table_sizes, strict=True
        )
        for _ in features
    ]


def _save_artifact(scripted: torch.jit.ScriptModule, out: Path) -> None:
    """Save ``out/model.pt`` atomically (a ``.partial`` file renamed into place). An earlier
    export's ``export.json`` goes first: a crash before the new record is written leaves an
    artifact without a record, never one beside another artifact's record."""
    partial = out / "model.pt.partial"
    try:
        scripted.save(str(partial), _extra_files={EXPORT_MARK: b"1"})
        (out / "export.json").unlink(missing_ok=True)
        publish_file(partial, out / "model.pt")  # on the disk before a record vouches for it
    except BaseException:
        partial.unlink(missing_ok=True)  # no multi-GB leftover
        raise


def summary(record: dict) -> str:
    """The lines ``mode=export`` prints."""
    ratio = record["table_bytes"] / record["table_bytes_fp32"]
    return "\n".join(
        [
            f"exported {record['checkpoint']} (step {record['step']}), tables "
            f"{record['quantization']}: {record['table_bytes']:,} bytes ({ratio:.2f}x fp32)",
            f"artifact: {record['artifact']} (torch.jit.load it after import fbgemm_gpu)",
        ]
    )
