"""Factories room: the typed factories that turn the config and a plan into this rank's objects.

Owns: the DLRM on the meta device (``model``), table initialisation independent of the plan
(``table_init``), the fused sparse and the dense optimizers (``optim``, ``replicated_optim``),
the non-finite-loss guard (``nonfinite``), the training pipeline (``pipeline``: TorchRec's
``TrainPipelineSparseDist`` and its kin), and ``experiment``, where model, plan, sharder,
optimizers and pipeline meet; docs/architecture.md lists every module.

May import: planning, perf, distributed, config, util, errors. Not modes, loop, data or record.
"""
