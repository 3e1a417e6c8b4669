"""Loop room: the training loop and what it measures and saves.

Owns: the trainer and its checkpointable state (``trainer``), draining the pipeline and
evaluating a split (``evaluate``), DCP checkpoints (``checkpoint``), whether a run may train
in its folder and from which checkpoint (``run_folder``), the settings a checkpoint records and
their comparison (``settings``), and AUROC / log loss / NE,
throughput and memory (``metrics``).

May import: perf, distributed, data, record, config, util, errors. Not factories, planning or
modes (the built objects come in as arguments).
"""
