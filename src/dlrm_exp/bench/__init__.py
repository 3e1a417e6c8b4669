"""Benchmarks room: what ``make bench`` runs, each printing numbers and ratios.

Owns: ``training`` (the framework's loop against a plain TorchRec loop), ``preprocess``
(``mode=preprocess`` against TorchRec's converter), ``loader`` (batches/s of each data option
against training steps/s). May import: build, planning, loop, distributed, data, record, config,
util; not the entry point or the modes.
"""
