"""Planning room: everything about where the embedding tables go.

Owns: the tables as the planner sees them (``tables``), planner constraints (``constraints``),
the Topology and per-rank memory capacity (``topology``), embedding storage and the cap that
fits (``storage``), TorchRec's planner call and its errors (``planner``), the planner's per-rank
estimates (``estimates``), plan files (``plan_file``), the plan as text and data
(``plan_record``), and ``job.plan_job``, the one function ``mode=plan`` and training both call.

May import: distributed, config, util, errors.
"""
