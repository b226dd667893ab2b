"""The same records stored and read the way other tools' documentation shows, for bench_peers.py.

A record is one sample of this project's cache as a dict of arrays (image uint8 (3, S, S), score uint8, geo
float16, roi uint8). Each format has a writer, `write(records, out)`, and a reader, `open(out, n, batch)`,
which returns `epoch(e)`: an iterator over that epoch's batches, each a dict of contiguous arrays or tensors
that are the batch's own memory (copied out of the store, never views of it: a lazy view would make a reader
look infinitely fast). Map-style readers take the samples in a seeded random order per epoch; streaming
readers use their own shuffle.

The peers get an environment of their own, so that their dependencies never reach the project's:

    python -m venv PEERS && . PEERS/bin/activate
    pip install torch==2.13.0                         # the CPU build, as in the README's set-up
    pip install -e ".[peers]" "torch==2.13.0"         # keeps that torch: unpinned, pip may swap in a CUDA build
    pip uninstall -y torchvision                      # where only a CUDA build of it exists; nothing here needs it
    python benchmarks/run_all.py --only peers --peers-python PEERS/bin/python

LitData and Mosaic Streaming both require torchvision, and the torchvision that matches torch 2.13 (0.28) is
available only as a CUDA build here, so it is removed again. LitData imports without it. Mosaic Streaming's
package imports its vision extras, and through them torchvision, when it is imported: `_streaming()` loads the
`streaming` package object without running its __init__ (which only re-exports), then imports `streaming.base`
itself, which needs no torchvision. No module is stubbed.
"""
from __future__ import annotations

import functools
import importlib.util
import pickle
import sys
from pathlib import Path

import numpy as np

SHARD_BYTES = 64 << 20   # chunk / shard size for the formats that split their data (LitData, MDS, WebDataset)
PICKLE_PROTOCOL = 5      # out-of-band capable; in-band here, as a plain pickle.dumps does


class Records:
    """The cache's variant-0 rows as dicts of views: what every format is written from."""

    def __init__(self, ds):
        self.rows = [ds.record(i, 0) for i in range(len(ds))]
        self.fields = ds.fields

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k: int) -> dict[str, np.ndarray]:
        return {f: self.rows[k][f] for f in self.fields}

    def spec(self) -> dict[str, tuple[np.dtype, tuple]]:
        return {f: (self.rows[0][f].dtype, self.rows[0][f].shape) for f in self.fields}


class Batcher:
    """A collate for per-sample readers: copies samples into one preallocated contiguous buffer per field,
    as this project's collate does, so that the per-sample formats are not charged for allocations."""

    def __init__(self, spec: dict, batch: int):
        self.buffers = {f: np.empty((batch, *shape), dtype) for f, (dtype, shape) in spec.items()}

    def __call__(self, samples: list[dict]) -> dict[str, np.ndarray]:
        for f, buf in self.buffers.items():
            for j, s in enumerate(samples):
                buf[j] = s[f]
        return {f: buf[:len(samples)] for f, buf in self.buffers.items()}


def shuffled_batches(n: int, batch: int, epoch: int) -> list[np.ndarray]:
    order = np.random.default_rng([0, epoch]).permutation(n)
    return [order[k:k + batch] for k in range(0, n, batch)]


def _per_sample(n: int, batch: int, spec: dict, load):
    """epoch(e) over a map-style store whose sample k is load(k)."""
    collate = Batcher(spec, batch)

    def epoch(e: int):
        for idx in shuffled_batches(n, batch, e):
            yield collate([load(int(k)) for k in idx])
    return epoch


# --- LitData -------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _cache_records(cache_dir: str) -> Records:
    from east_cache.reader import CacheDataset
    return Records(CacheDataset(cache_dir, check_stale=False))


def _cache_item(cache_dir: str, k: int) -> dict[str, np.ndarray]:
    """Sample k read from the cache in the optimize worker (a top-level function, so that it pickles)."""
    return {f: np.array(v) for f, v in _cache_records(cache_dir)[k].items()}


def write_litdata(records: Records, out: Path, cache_dir: Path) -> None:
    import litdata
    litdata.optimize(fn=functools.partial(_cache_item, str(cache_dir)), inputs=list(range(len(records))),
                     output_dir=str(out), chunk_bytes=SHARD_BYTES, num_workers=1)


def open_litdata(out: Path, n: int, batch: int, spec: dict):
    import litdata
    ds = litdata.StreamingDataset(str(out), shuffle=True, seed=0)
    loader = litdata.StreamingDataLoader(ds, batch_size=batch, num_workers=0)
    return lambda e: iter(loader)   # the loader counts its epochs itself


# --- Mosaic Streaming ------------------------------------------------------------------------------------------

def _streaming():
    """streaming.base, without running streaming/__init__.py (see the module docstring)."""
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        if spec is None:
            raise ImportError("No module named 'streaming' (pip install mosaicml-streaming)")
        sys.modules["streaming"] = importlib.util.module_from_spec(spec)
    import streaming.base
    return streaming.base


def write_mds(records: Records, out: Path) -> None:
    columns = {f: f"ndarray:{dtype.name}:{','.join(map(str, shape))}" for f, (dtype, shape) in records.spec().items()}
    with _streaming().MDSWriter(out=str(out), columns=columns, compression=None, size_limit=SHARD_BYTES) as w:
        for k in range(len(records)):
            w.write(records[k])


def open_mds(out: Path, n: int, batch: int, spec: dict):
    from torch.utils.data import DataLoader
    ds = _streaming().StreamingDataset(local=str(out), shuffle=True, shuffle_seed=0, batch_size=batch)
    loader = DataLoader(ds, batch_size=batch, num_workers=0)
    return lambda e: iter(loader)


# --- Hugging Face datasets -------------------------------------------------------------------------------------

def write_hf(records: Records, out: Path) -> None:
    from datasets import Array3D, Dataset, Features
    features = Features({f: Array3D(shape, dtype.name) for f, (dtype, shape) in records.spec().items()})
    ds = Dataset.from_generator(lambda: (records[k] for k in range(len(records))), features=features,
                                cache_dir=str(out.with_name(out.name + "-build")))
    ds.save_to_disk(str(out))


def open_hf(out: Path, n: int, batch: int, spec: dict, stored_dtypes: bool = True):
    """numpy format; stored_dtypes: with dtype=None, else the documented default, which widens integers to
    int64 and floats to float32."""
    from datasets import load_from_disk
    ds = load_from_disk(str(out)).with_format("numpy", **({"dtype": None} if stored_dtypes else {}))

    def epoch(e: int):
        for idx in shuffled_batches(n, batch, e):
            yield {f: np.ascontiguousarray(v) for f, v in ds[idx.tolist()].items()}
    return epoch


# --- WebDataset ------------------------------------------------------------------------------------------------

def write_wds(records: Records, out: Path) -> None:
    import webdataset as wds
    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES, verbose=0) as w:
        for k in range(len(records)):
            w.write({"__key__": f"{k:08d}", **{f"{f}.npy": v for f, v in records[k].items()}})


def open_wds(out: Path, n: int, batch: int, spec: dict):
    import webdataset as wds
    shards = sorted(str(p) for p in out.glob("*.tar"))
    collate = Batcher(spec, batch)

    def epoch(e: int):
        stream = wds.WebDataset(shards, shardshuffle=len(shards), seed=e, empty_check=False).decode()
        samples = []
        for s in stream:
            samples.append({f: s[f"{f}.npy"] for f in spec})
            if len(samples) == batch:
                yield collate(samples)
                samples = []
        if samples:
            yield collate(samples)
    return epoch


# --- LMDB, pickles, np.save ------------------------------------------------------------------------------------

def _key(k: int) -> bytes:
    return f"{k:08d}".encode()


def write_lmdb(records: Records, out: Path) -> None:
    import lmdb
    size = len(pickle.dumps(records[0], PICKLE_PROTOCOL)) * len(records)
    env = lmdb.open(str(out), map_size=2 * size + SHARD_BYTES)   # an upper bound: LMDB's map only reserves address space
    with env.begin(write=True) as txn:
        for k in range(len(records)):
            txn.put(_key(k), pickle.dumps(records[k], PICKLE_PROTOCOL))
    env.sync()
    env.close()


def open_lmdb(out: Path, n: int, batch: int, spec: dict):
    import lmdb
    env = lmdb.open(str(out), readonly=True, lock=False)
    txn = env.begin(buffers=True)
    return _per_sample(n, batch, spec, lambda k: pickle.loads(txn.get(_key(k))))


def write_pickles(records: Records, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for k in range(len(records)):
        with open(out / f"{k:08d}.pkl", "wb") as f:
            pickle.dump(records[k], f, PICKLE_PROTOCOL)


def open_pickles(out: Path, n: int, batch: int, spec: dict):
    def load(k: int):
        with open(out / f"{k:08d}.pkl", "rb") as f:
            return pickle.load(f)
    return _per_sample(n, batch, spec, load)


def write_npy(records: Records, out: Path) -> None:
    for k in range(len(records)):
        (out / f"{k:08d}").mkdir(parents=True, exist_ok=True)
        for f, v in records[k].items():
            np.save(out / f"{k:08d}" / f"{f}.npy", v)


def open_npy(out: Path, n: int, batch: int, spec: dict):
    return _per_sample(n, batch, spec, lambda k: {f: np.load(out / f"{k:08d}" / f"{f}.npy") for f in spec})


def write_ram_pickle(records: Records, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "all.pkl", "wb") as f:
        pickle.dump([{f: np.array(v) for f, v in records[k].items()} for k in range(len(records))], f,
                    PICKLE_PROTOCOL)


def open_ram_pickle(out: Path, n: int, batch: int, spec: dict):
    """Loaded whole into RAM once, when opened (outside the timed epochs)."""
    with open(out / "all.pkl", "rb") as f:
        samples = pickle.load(f)
    return _per_sample(n, batch, spec, samples.__getitem__)
