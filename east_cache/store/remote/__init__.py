"""Caches and data sets at URLs (S3 and other fsspec stores), read through a local cache folder, built by
uploading a local staging folder. Needs the `remote` extra (fsspec, s3fs) only where a URL is used.

location    Location (a local path or a URL), redact, the per-process storage client
transfer    whole objects down (sparse, block by block) and up (atomically), listings
retry       RetryPolicy: bounded retries with backoff
local_cache LocalCache: the manifest fetched at open, files downloaded once per machine on first use, the limit
locks       the per-file fetch and pin locks of a local cache folder
space       the size limit: sizes as flags write them, the least limit, what to evict
ahead       Ahead: an epoch's files fetched before the reader needs them
share       node_files, node_items: each node's fixed share of the files
publish     Publisher: a staging folder's cache uploaded, the manifest last
bucket_lock one build at a time per URL
sources     source objects fingerprinted from a listing
"""
