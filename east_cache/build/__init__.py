"""The build: what makes a cache out of a data set (east-cache build) and writes it in store/'s on-disk format.

run (build_cache: the plan told, workers fill the files, the manifest committed), request (the build flags resolved
against an existing cache), plan (which samples are computed, copied or kept), worker and pool (the parallel fill),
journal (what a killed build resumes from), announce (the plan printed first), outdir (what a build may touch in
--out), stale (whether the source changed since), strategy (--strategy auto, --image-codec auto), fingerprint (what
makes a cache out of date: config, sample code, source files), cluster (--backend dask), publish and bucket_lock (a
cache built to a URL: uploaded from a staging folder, one build at a time). Imports ingest, sample and store; never
the reader, never torch.
"""
