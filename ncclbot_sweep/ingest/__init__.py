"""Ingest: campaign folders and loose files in, a Parquet dataset out (architecture section 5).

The walker (:mod:`.walk`) hashes every input, detects its format, parses it with the parsers
at the package root and accounts for every file; :mod:`.rowcheck` keeps impossible values out
of the tables; :mod:`.datasets` holds the schemas, the one writer and the readers. The dataset
root it gives is what the analysis reads (through ``ncclbot_sweep.analysis.inputs``). Imports
the leaves and the sweep's manifest, never the analysis (architecture section 2.2).
"""
