"""Record room: what a run leaves for people and tools to read.

Owns: TensorBoard scalars and HParams (``tracking``), the typed record behind
``metrics.json`` (``run_record``), sweep names and summaries (``sweep``), and the comparison
report with its plots (``report``). May import: config, util (and :mod:`dlrm_exp.errors`).
"""
