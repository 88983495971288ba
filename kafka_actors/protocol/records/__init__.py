"""Record batches: decoding (``decode``, with its native path ``_crecords.c`` built at
install), building (``build``, for tests, benchmarks and the testkit) and the Arrow
columnar form (``arrow``). Pure.
"""
