"""Shared fixtures: tiny synthetic datasets and a small build config, so every test takes seconds on a CPU."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import small_config  # noqa: F401  (re-exported for modules that import it from conftest)

from preprocess.tools.sampledata import write_sample_dataset


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

