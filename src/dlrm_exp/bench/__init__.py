"""Benchmarks room: what ``make bench`` runs, each printing numbers and ratios.

Owns: ``training`` (the framework's loop against a plain TorchRec loop), ``preprocess``
(``mode=preprocess`` against TorchRec's converter), ``loader`` (batches/s of each data option
against training steps/s), ``quality`` (the AUROC bars of the synthetic presets), ``inference``
(the exported model's agreement and latency, through ``mode=export``), ``utilization``
(achieved FLOP/s and bytes/s against the measured peaks, fp32 vs bf16), ``parquet`` (the
Parquet loader against training, streamed or in memory), ``fast`` (the fast setting against
``dlrm_main.py``'s recipe, each lever alone) and ``targets`` (what
each benchmark must reach, and the table of met and missed targets that ends ``make bench``).

May import: modes, factories, planning, loop, perf, distributed, data, record, config, util,
errors. Not the entry point (:mod:`dlrm_exp.cli`).
"""
