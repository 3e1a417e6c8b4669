"""Record room: what a run leaves for people and tools to read.

Owns: TensorBoard scalars and HParams (``tracking``), the typed record behind
``metrics.json`` (``run_record``), the one table of metric labels and formats
(``metric_table``), run folders as records (``runs``), sweep summaries (``sweep``), statistics
(``stats``) and comparisons with a regression gate (``compare``), and the report with its plots
(``report``).

May import: config, util, errors.
"""
