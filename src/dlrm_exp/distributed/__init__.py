"""Distributed room: processes and what crosses between them.

Owns: process groups, ranks and worker launch (``launch``; the rank a launcher set, read
without torch: ``env``), the embedding sharder that also offers row-wise types on CPU
(``sharder``), quantized-communication codecs and the precisions they run in (``qcomms``),
submitit's preemption signal held back while a checkpoint is saved (``preemption``), and the
byte count of collectives (``comm_stats``) over the private torch hooks it needs
(``torch_internals``).

May import: config, util, errors.
"""
