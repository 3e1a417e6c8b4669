"""Utility room: small helpers with no knowledge of DLRM, TorchRec or the config.

Owns: console and worker logging (``logs``), counter-based hashing for reproducible random
numbers (``hashing``), atomic file writes (``files``), the count transform
``log(1 + max(x, 0))`` (``dense_transform``), the record of a setting that ran other than asked
(``substitution``).

May import: errors (besides the standard library and third-party packages).
"""
