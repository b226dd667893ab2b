"""`build --backend dask --scheduler ADDRESS`: the same joblib build, run by a dask.distributed cluster.

joblib's dask backend hands each call to the cluster through the Client that is current while the
build runs. Workers read the images and write the cache by path, so --data and --out must be on
storage that every worker sees under the same path, and this package must be importable there.
"""
from __future__ import annotations

from contextlib import contextmanager

from east_cache.errors import BuildError

INSTALL_DASK = 'pip install -e ".[dask]"'
CONNECT_TIMEOUT = 10.0   # s to reach the scheduler before giving up


@contextmanager
def dask_client(address: str, timeout: float = CONNECT_TIMEOUT):
    """A distributed.Client of the scheduler at address, the current one (joblib's) inside the block."""
    try:
        from distributed import Client
    except ImportError as e:
        raise BuildError(f"--backend dask needs dask.distributed, which is not installed. Install it with: "
                         f"{INSTALL_DASK}") from e
    try:
        client = Client(address, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as e:
        raise BuildError(f"cannot reach the dask scheduler at {address} ({e}). Check the address (tcp://HOST:8786) "
                         f"and that a scheduler runs there, with workers that see --out") from e
    with client:
        yield client
