"""Build-setting warnings: shown when most images are upscaled or most crops are text-free, not otherwise."""
from __future__ import annotations

from east_cache.config import BuildConfig
from east_cache.build.announce import upscale_warning
from east_cache.tools.advice import text_free_warning
from east_cache.tools.coverage import Coverage

CFG = BuildConfig(image_size=2048, input_size=1024)


def cov(text_free: float, blank: float = 0.0) -> Coverage:
    return Coverage((1,), 10, (0.5,), text_free, blank, 1.0)


def test_upscale_warning_names_the_share_and_a_size():
    msg = upscale_warning([(1280, 720)] * 3 + [(2048, 1536)], CFG)
    assert "75%" in msg and "--image-size 1280" in msg
    assert upscale_warning([(1280, 720), (2048, 1536), (1900, 1200)], CFG) is None
    assert upscale_warning([], CFG) is None


def test_text_free_warning_suggests_the_flag_that_helps():
    assert "--crop read" in text_free_warning(cov(0.8), CFG, "build")
    assert "annotations" in text_free_warning(cov(0.8, blank=0.8), CFG, "read")
    assert text_free_warning(cov(0.3), CFG, "build") is None
