"""Loop room: the training loop and what it measures and saves.

Owns: the trainer and its checkpointable state (``trainer``), draining the pipeline and
evaluating a split (``evaluate``), DCP checkpoints (``checkpoint``), and AUROC / log loss / NE,
throughput and memory (``metrics``).

May import: perf, distributed, data, record, config, util, errors. Not factories, planning or
modes (the built objects come in as arguments).
"""
