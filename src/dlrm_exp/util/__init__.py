"""Utility room: small helpers that build no model and read no config (a few know library
facts: ``logs`` filters TorchRec's and FBGEMM's chatter, ``fbgemm_compat`` their tested release
pairs).

Owns: among others (docs/architecture.md lists every module), console and worker logging
(``logs``), counter-based hashing for reproducible random numbers (``hashing``), atomic file
writes (``files``), the count transform ``log(1 + max(x, 0))`` (``dense_transform``), the
record of a setting that ran other than asked (``substitution``).

May import: errors (besides the standard library and third-party packages).
"""
