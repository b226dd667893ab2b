"""Shared fixtures: tiny synthetic datasets and a small build config, so every test takes seconds on a CPU."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import make_tiny_cache
from s3 import faulty, no_client_retries, s3, s3_endpoint  # noqa: F401  fixtures: a local S3 server, a bucket, a faulty proxy

from east_cache.tools.sampledata import write_sample_dataset

# One thread for torch's operators, in this process and in the commands the tests start (unless the environment says
# otherwise): the tests' models and crops are tiny, and where another program keeps a core busy, an operator split
# over two threads waits for the slower one, which made the training tests several times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# fsync in this process checks its file descriptor and returns: the tests check what durable writes leave (whole
# files, renames, what an error or Ctrl-C leaves), never the disk's flush, which only a power cut could test and which
# took ~5 s of the fast suite's wall time (over 4,000 syncs of the builds' files). Commands run as processes
# (the SIGKILL tests) keep the real one. A closed or bad descriptor still raises OSError, as fsync would;
# tests/test_atomic.py checks that the durable writes call fsync where they should.
def _fsync_checked(fd) -> None:
    os.fstat(fd if isinstance(fd, int) else fd.fileno())


os.fsync = _fsync_checked


@pytest.fixture(scope="session")
def sample_root(tmp_path_factory) -> Path:
    """Five small pages with the sample set's full mix of words (illegible, tagged, 5-point, EXIF-rotated)."""
    root = tmp_path_factory.mktemp("sample")
    return write_sample_dataset(root, n_images=5, words_per_page=12, page_size=(240, 180), seed=1)


@pytest.fixture
def data_copy(sample_root, tmp_path) -> Path:
    """A private, editable copy of the sample set."""
    dst = tmp_path / "data"
    shutil.copytree(sample_root, dst)
    return dst


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """Two pages small enough for 64 px crops: a training step takes a fraction of a second on a CPU."""
    return write_sample_dataset(tmp_path_factory.mktemp("tiny") / "data", n_images=2, words_per_page=8,
                                page_size=(160, 120), seed=0)


@pytest.fixture(scope="session")
def tiny_cache(tiny_data, tmp_path_factory) -> Path:
    """A cache of tiny_data (helpers.TINY): 2 images, 64 px, maps at x0.5, one variant. Read only."""
    return make_tiny_cache(tiny_data, tmp_path_factory.mktemp("tiny_cache") / "c")
