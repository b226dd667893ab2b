"""A cache at a URL (S3 and other fsspec stores) reached from this machine: what the reader, the tools (info,
verify) and the build's upload (east_cache/build/publish.py, under build/bucket_lock.py) all use. Needs the `remote`
extra (fsspec, s3fs) only where a URL is used. Where a location lies and the storage client of a process are
east_cache/location.py's, retries east_cache/retry.py's (data sets at URLs are read by ingest too); a data set's
objects are ingest/objects.py's.

transfer    whole objects down (sparse, block by block) and up (atomically)
local_cache LocalCache: the manifest fetched at open, files downloaded once per machine on first use, the limit
locks       the per-file fetch and pin locks of a local cache folder
space       the size limit: sizes as flags write them, the least limit, what to evict
"""
