"""Perf room: what a run costs and how close it comes to the machine.

Owns: the dense FLOPs and embedding bytes of one training sample, from the model's shapes
(``flops``), the measured matmul and copy peaks of this machine, cached (``peak``), the
theoretical matmul peak that bounds them (``theoretical_peak``), the utilization record of
``metrics.json`` (``utilization``) and ``train.profile``'s
``torch.profiler`` traces and RSS timeline (``profile``).

May import: config, util, errors.
"""
