"""The cache on disk, which the build writes and the reader reads: the record fields and file names (format), the
page record's layout and its image codecs, which file and row hold a sample (layout), the file formats, the sidecar
of words, the manifest, the checks a reader makes when it opens a cache (integrity), the records' and files'
checksums (fingerprint), and a cache at a URL reached from this machine (remote/)."""
