"""Shared fixtures: tiny synthetic datasets and a small build config, so every test takes seconds on a CPU."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preprocess.config import BuildConfig
from preprocess.tools.sampledata import write_sample_dataset

SMALL = dict(image_size=192, input_size=96, map_scale=0.5, variants=2, crop_tries=50)


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


def small_config(**over) -> BuildConfig:
    return BuildConfig(**{**SMALL, **over})
