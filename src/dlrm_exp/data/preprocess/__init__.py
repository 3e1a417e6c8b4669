"""Preprocessing: Criteo TSV to TorchRec's binary npy layout (``mode=preprocess``), and the
vectorized TSV parser that ``data=criteo_tsv`` reads with too.

Modules: ``tsv_parse`` (bytes -> parsed rows, with bad-line reasons), ``parse_blocks`` (worker
processes parsing byte ranges in place), ``npy_stream`` (npy files written row block by row
block), ``contiguous`` (TorchRec's contiguous re-indexing), ``convert`` (the conversion and its
report). Nothing is imported here, so ``data.criteo_tsv`` can use the parser without loading
the conversion.
"""
