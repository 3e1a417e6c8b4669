"""Facts about the Criteo click logs and the MLPerf DLRM-DCNv2 inputs that several groups use."""

#: Criteo click logs: 13 integer ("dense") and 26 categorical features per row.
CRITEO_NUM_DENSE = 13
CRITEO_NUM_SPARSE = 26
#: The columns of a Criteo TSV line, in order (the names of the shipped ``criteo`` schema).
CRITEO_LABEL = "label"
CRITEO_DENSE_COLUMNS = [f"I{j + 1}" for j in range(CRITEO_NUM_DENSE)]
CRITEO_SPARSE_COLUMNS = [f"C{j + 1}" for j in range(CRITEO_NUM_SPARSE)]
CRITEO_COLUMNS = [CRITEO_LABEL, *CRITEO_DENSE_COLUMNS, *CRITEO_SPARSE_COLUMNS]


#: Ids per sample of each of the 26 Criteo features in MLPerf DLRM-DCNv2 (MLCommons training
#: reference, ``--multi_hot_sizes``); 214 per sample.
MLPERF_MULTI_HOT_SIZES = [
    *(3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1),
    *(6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1),
]
