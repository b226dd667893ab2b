"""The image codec of a page cache (--image-codec raw|jpeg|auto): targets bit for bit the same in both codecs and
the image within the codec's bound of raw on photo-like pages, through every way of reading; auto's choice, the
plan, the manifest and info; a codec change rebuilds; crops decoded for the device; damage named."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import simplejpeg
import torch
from helpers import photo, psnr, small_config

from east_cache.cli import main as cli_main
from east_cache.errors import BuildError, CacheError
from east_cache.reader import CacheDataset, collate
from east_cache.reader import jpeg_device
from east_cache.reader.expand import expand_batch
from east_cache.build import strategy
from east_cache.build.run import build_cache
from east_cache.store.jpeg_tiles import tile_stream
from east_cache.store.manifest import Manifest, data_path
from east_cache.store.page_record import JPEG_BLOCK, JPEG_STREAMS
from east_cache.tools.sampledata import write_sample_dataset
from east_cache.tools.verify import verify

PSNR_BOUND_DB = 40.0   # the image error jpeg pages may add to a crop, against the raw page's crop
EPOCHS = range(4)
# Pages at the photos' own scale (a camera photo is about twice a 2048 px page, as helpers.photo makes them), crops
# large enough to hold several lines of text and the paper around them.
PHOTO_PAGES = dict(image_size=480, input_size=256, variants=2, geometry="build")


def build(data, out, **over):
    return build_cache(small_config(**{**PHOTO_PAGES, **over}), [data], out, jobs=1, quiet=True)


@pytest.fixture(scope="module")
def photo_root(tmp_path_factory):
    """A sample set whose images are replaced by photo-like ones of their frames' size (the words stay)."""
    root = write_sample_dataset(tmp_path_factory.mktemp("photos") / "data", n_images=5, words_per_page=12,
                                page_size=(480, 360), seed=1)
    images = json.loads((root / "ufo" / "train.json").read_text())["images"]
    for k, (name, entry) in enumerate(sorted(images.items())):
        path = root / "images" / name
        cv2.imwrite(str(path), photo(entry["img_h"], entry["img_w"], seed=k)[..., ::-1],
                    [cv2.IMWRITE_JPEG_QUALITY, 95] if path.suffix == ".jpg" else [])
    return root


@pytest.fixture(scope="module")
def caches(photo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("codecs")
    for codec in ("raw", "jpeg"):
        build(photo_root, out / codec, image_codec=codec)
    return out / "raw", out / "jpeg"


def items(ds, epoch: int) -> list[dict]:
    ds.set_epoch(epoch)
    return [ds[i] for i in range(len(ds))]


@pytest.mark.slow
def test_targets_are_bit_identical_and_images_within_the_bound(caches):
    """Full items (in process, show) and compact items (train.py) of the same epoch: score, geometry, ROI equal bit
    for bit in both codecs; the jpeg crop within PSNR_BOUND_DB of the raw crop, and the same pixels either way."""
    raw, jpeg = (CacheDataset(c) for c in caches)
    compact = CacheDataset(caches[1], compact=True)
    worst, cut = np.inf, 0
    for e in EPOCHS:
        compact.set_epoch(e)
        got = expand_batch(collate(compact.__getitems__(list(range(len(compact))))))
        for i, (a, b) in enumerate(zip(items(raw, e), items(jpeg, e), strict=True)):
            for k in ("score", "geo", "roi"):
                assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), (e, i, k)
            worst = min(worst, psnr(a["image"], b["image"]))
            assert got["image"][i].numpy().tobytes() == b["image"].tobytes(), (e, i)
            for k in ("score", "roi"):
                assert got[k][i].numpy().tobytes() == b[k].tobytes(), (e, i, k)
            assert torch.equal(got["geo"][i].half(), torch.from_numpy(b["geo"]))
            cut += bool((b["roi"] == 0).any())
    assert PSNR_BOUND_DB <= worst < np.inf, worst
    assert cut, "some crops must hold don't-care pixels"


def test_a_jpeg_cache_is_a_fraction_of_the_raw_one(caches):
    raw, jpeg = (sum(f.bytes for f in Manifest.load(c).files) for c in caches)
    assert jpeg < raw / 4


def test_the_device_decodes_the_streams_workers_hand_over(caches, monkeypatch):
    """decode_on_device: compact jpeg items carry their blocks' JPEG streams, which expand_batch decodes for the
    whole batch (on the CPU where there is no nvJPEG; through a batch decoder of nvJPEG's contract, every tile
    placed in its block): the same batches as the pixels decoded where the batch is written."""
    assert jpeg_device.nvjpeg("cpu") is None
    ds, streams = CacheDataset(caches[1], compact=True), CacheDataset(caches[1], compact=True)
    streams.decode_on_device(True)
    idx = list(range(len(ds)))

    def cpu_decoder(data):   # nvJPEG's contract: a list of 1-D uint8 tensors in, (3, T, T) uint8 tensors out
        return [torch.from_numpy(cv2.imdecode(d.numpy(), cv2.IMREAD_COLOR_RGB)).permute(2, 0, 1) for d in data]
    for e in (0, 3):
        ds.set_epoch(e)
        streams.set_epoch(e)
        want, batch = collate(ds.__getitems__(idx)), collate(streams.__getitems__(idx))
        assert JPEG_STREAMS in batch and JPEG_BLOCK not in batch
        assert batch[JPEG_STREAMS].shape[1] < want[JPEG_BLOCK][0].numel(), "streams are smaller than pixels"
        want = expand_batch(want)
        for decoder in (None, cpu_decoder):
            monkeypatch.setattr(jpeg_device, "nvjpeg", lambda device, d=decoder: d)
            got = expand_batch(batch)
            assert all(torch.equal(got[k], want[k]) for k in want), (e, decoder)


def test_auto_picks_raw_while_the_raw_cache_fits_half_the_ram_else_jpeg(photo_root, tmp_path, monkeypatch):
    monkeypatch.setattr(strategy, "available_ram", lambda: 1 << 40)
    build(photo_root, tmp_path / "big-ram")
    monkeypatch.setattr(strategy, "available_ram", lambda: 1 << 20)
    build(photo_root, tmp_path / "small-ram")
    for name, codec in (("big-ram", "raw"), ("small-ram", "jpeg")):
        m = Manifest.load(tmp_path / name)
        assert m.config.image_codec == codec and m.codec_reason.startswith("auto: the raw cache"), m.codec_reason
    monkeypatch.setattr(strategy, "available_ram", lambda: 1 << 40)
    r = build(photo_root, tmp_path / "small-ram")   # auto keeps an existing cache's codec
    assert r.up_to_date and Manifest.load(tmp_path / "small-ram").config.image_codec == "jpeg"


def test_the_plan_and_info_say_the_codec_its_reason_and_both_sizes(photo_root, tmp_path, capsys):
    out = tmp_path / "c"
    args = ["build", "--data", str(photo_root), "--out", str(out), "--image-size", "480", "--input-size", "256",
            "--jobs", "1", "--image-codec", "jpeg", "--image-quality", "85"]
    assert cli_main(args) == 0
    err = capsys.readouterr().err
    assert "image codec jpeg at quality 85, chroma 4:2:0: chosen with --image-codec (estimated: raw " in err
    assert " jpeg " in err
    assert cli_main(["info", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "images     jpeg: JPEG tiles of 128 px at quality 85, chroma 4:2:0" in printed
    assert "chosen with --image-codec" in printed
    assert "--image-codec jpeg --image-quality 85" in Manifest.load(out).build_command(out)


def tile_chroma(cache) -> str:
    """The chroma subsampling of the first page's first JPEG tile, as its header says ("420", "444")."""
    tiles = CacheDataset(cache).cropper.page(0, 0).image.tiles
    return simplejpeg.decode_jpeg_header(tile_stream(tiles, 0, "first page"))[3]


@pytest.mark.slow
def test_changing_the_codec_its_quality_or_chroma_rebuilds_everything(photo_root, caches, tmp_path):
    out = tmp_path / "c"
    build(photo_root, out, image_codec="jpeg")
    assert tile_chroma(out) == "420"
    r = build(photo_root, out, image_codec="jpeg", image_quality=80)
    assert r.computed == 10 and "image_quality: 90 -> 80" in r.full_rebuild_reason
    r = build(photo_root, out, image_codec="jpeg", image_quality=90, image_chroma="444")
    assert r.computed == 10 and "image_chroma: 420 -> 444" in r.full_rebuild_reason and tile_chroma(out) == "444"
    assert "--image-codec jpeg --image-chroma 444" in Manifest.load(out).build_command(out)
    raw, full = CacheDataset(caches[0]), CacheDataset(out)   # full chroma: within the bound of raw too, targets equal
    worst = min(psnr(a["image"], b["image"]) for a, b in zip(items(raw, 1), items(full, 1), strict=True))
    assert PSNR_BOUND_DB <= worst < np.inf, worst
    r = build(photo_root, out, image_codec="raw")
    assert r.computed == 10 and "image_codec: jpeg -> raw" in r.full_rebuild_reason
    assert Manifest.load(out).spec.kind.name == "page"


def test_crop_build_records_keep_raw_images_and_zarr_is_for_them(photo_root, tmp_path):
    assert Manifest.load(build(photo_root, tmp_path / "b", crop="build").out).config.image_codec == "raw"
    with pytest.raises(BuildError, match="--image-codec jpeg stores pages .*--crop read"):
        build(photo_root, tmp_path / "j", crop="build", image_codec="jpeg")
    with pytest.raises(BuildError, match="page caches .* are packed into npy files: pass --format npy"):
        build_cache(small_config(**PHOTO_PAGES), [photo_root], tmp_path / "z", jobs=1, quiet=True, file_format="zarr")


def damage_a_scan(cache) -> tuple[str, str]:
    """Flip a bit in the middle of the first page's JPEG data; (file name, image name) of that page."""
    ds = CacheDataset(cache)
    f, r = ds.locate(0, 0)
    image = ds.file_records(f)[r]["image"]
    at = image.ctypes.data - ds.file_records(f).data.ctypes.data + image.size - image.size // 3
    path = ds.path(f)
    header = len(path.read_bytes()) - ds.file_records(f).data.size
    with open(path, "r+b") as fh:
        fh.seek(header + at)
        byte = fh.read(1)[0]
        fh.seek(header + at)
        fh.write(bytes([byte ^ 0x10]))
    return path.name, ds.names[0]


def test_a_damaged_tile_is_named_by_verify_and_refused_when_read(photo_root, tmp_path):
    out = tmp_path / "c"
    build(photo_root, out, image_codec="jpeg", strategy="image")
    file, image = damage_a_scan(out)
    bad = verify(out)
    assert [name for name, _ in bad] == [file]
    assert f"image {image}, variant 0: tile (column" in bad[0][1] and "CRC32 mismatch" in bad[0][1]
    ds = CacheDataset(out)
    with pytest.raises(CacheError, match=rf"{file}: image {image}, variant 0: tile .* damaged .*verify CACHE"):
        ds.cropper.page(0, 0).image.array()
    r = build(photo_root, out, image_codec="jpeg", strategy="image")   # the build redoes exactly that file
    assert r.files_written == 1 and not verify(out)


def test_a_truncated_page_file_is_refused_when_the_cache_is_opened(photo_root, tmp_path):
    out = tmp_path / "c"
    build(photo_root, out, image_codec="jpeg")
    path = data_path(out, Manifest.load(out).files[0].name)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CacheError, match=rf"{path.name} is damaged or missing: .*the manifest recorded"):
        CacheDataset(out)
    assert verify(out)


def test_a_page_whose_jpeg_outgrows_its_slot_is_refused_naming_the_image(monkeypatch):
    """Noise at quality 100 takes more bytes than its raw pixels, still within the slot's bound; past the bound the
    build stops with a DataError that names the image and what to change."""
    from east_cache.errors import DataError
    from east_cache.store import page_jpeg
    noise = np.random.default_rng(0).integers(0, 256, (3, 256, 256), np.uint8)
    image = page_jpeg.JpegCodec(100, "444").encode(noise, "train.json: image a.jpg")
    assert noise.nbytes < image.tiles.nbytes <= page_jpeg.jpeg_values((256, 256))
    monkeypatch.setattr(page_jpeg, "JPEG_BOUND", 1)
    with pytest.raises(DataError, match=r"image a\.jpg: its page's JPEG tiles .*--image-quality"):
        page_jpeg.JpegCodec(100, "444").encode(noise, "train.json: image a.jpg")
