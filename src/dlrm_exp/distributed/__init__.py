"""Distributed room: processes and what crosses between them.

Owns: process groups, ranks and worker launch (``launch``), the embedding sharder that also
offers row-wise types on CPU (``sharder``), quantized-communication codecs (``qcomms``), and
the byte count of collectives (``comm_stats``). May import: config, util (and
:mod:`dlrm_exp.errors`).
"""
