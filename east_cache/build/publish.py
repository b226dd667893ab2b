"""Building to a bucket: the build writes a local staging folder as it writes any --out, and this puts the result
at the URL, the manifest last.

A store has no rename, so the manifest's put is the commit: it goes up only once every file it names is stored
with its local size (listed again to be sure), and files of the previous build are deleted only after it. A
build killed before that leaves the previous manifest, which names only files still stored. Data file names carry
a digest of their samples, so a rebuild uploads only names the bucket lacks. The bucket lock (bucket_lock.py)
keeps a second build away meanwhile.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from east_cache.errors import BuildError, CacheError, RemoteError
from east_cache.location import Location, filesystem, listing
from east_cache.retry import DEFAULT_RETRY, RetryPolicy, retrying
from east_cache.atomic import write_atomic
from east_cache.store.format import DATA_DIR, MANIFEST
from east_cache.store.formats import format_of
from east_cache.store.manifest import Manifest, data_path
from east_cache.build.outdir import foreign_manifest
from east_cache.build.plan import CORRUPT_MARKER, OWN_FILE
from east_cache.build.bucket_lock import bucket_lock
from east_cache.store.remote.local_cache import LocalCache, LocalCacheSettings
from east_cache.store.remote.transfer import get_bytes, put_bytes, upload
from east_cache.store.sidecar import quads_path

ADVICE = "Check the credentials and the network, then build again: files stored already are not uploaded again"
TEMP_UPLOAD = re.compile(r"\.part\d+$")   # transfer.upload's temp names, where a store has no atomic put


def default_staging(dest: Location) -> Path:
    """Where a build for dest writes before uploading: kept between builds, so a rebuild on this machine reuses it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "east-cache" / f"build-{dest.key()}"


@dataclass
class PublishReport:
    uploaded_files: int = 0    # data files (with their sidecars) put now
    uploaded_bytes: int = 0
    stored_files: int = 0      # named by the manifest and stored already under their names
    deleted_files: int = 0     # stored objects no manifest names any more, deleted after the commit


class Publisher:
    def __init__(self, dest: Location, staging: Path, jobs: int = 4, policy: RetryPolicy = DEFAULT_RETRY):
        self.dest, self.staging, self.policy = dest, Path(staging), policy
        self.pool = ThreadPoolExecutor(max(1, jobs))
        self.pending: dict[str, Future] = {}
        self.report = PublishReport()
        self.unpulled: list[str] = []   # stored files pull() could not take (damaged, or unreadable)
        self._stored: dict[str, dict] | None = None

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def pull(self) -> int:
        """The cache stored at dest into the staging folder (its manifest, the files staging lacks, and the list of
        files `verify URL` found bad), so that the build updates it incrementally; the number of files downloaded.
        0 where dest holds no cache this code reads (the build then makes every file). A stored file that cannot be
        fetched, or that fails the check against the manifest, is left out (`unpulled`): the build makes it again."""
        self._pull_marker()
        if not filesystem(self.dest).exists(self.dest.join(MANIFEST).url):
            return 0
        self.refuse_foreign_manifest()
        try:
            cache = LocalCache(self.dest, LocalCacheSettings(folder=self.staging, retry=self.policy))
        except CacheError:   # another format version, a damaged manifest: rebuilt from the source
            return 0
        for name in cache.units:
            try:
                cache.ensure(name)
            except RemoteError:
                self.unpulled.append(name)
        return cache.downloaded_files

    def staging_note(self) -> str:
        """What the staging folder keeps on this machine, and how to remove it."""
        held = sum(p.stat().st_blocks * 512 for p in self.staging.rglob("*") if p.is_file())   # holes cost nothing
        return (f"staging: {self.staging} keeps a full copy ({held / 2**20:,.1f} MiB on disk), so that the next build "
                f"from this machine downloads nothing; `rm -r {self.staging}` removes it")

    def refuse_foreign_manifest(self) -> None:
        """A manifest.json at dest that no build of ours wrote, with none of our data files beside it, is someone's
        object: refused naming the URL (the staging folder is no place the user could fix it), left as it is."""
        why = foreign_manifest(get_bytes(self.dest.join(MANIFEST), self.policy, ADVICE))
        if why and not any(OWN_FILE.fullmatch(rel.split("/")[0]) for rel in listing(self.dest.join(DATA_DIR))):
            raise BuildError(f"{self.dest}: holds a {MANIFEST} that no build of this tool wrote ({why}); it is left "
                             f"as it is. Build into another --out URL, or delete {self.dest.join(MANIFEST)} if it is a "
                             f"damaged cache of ours")

    def _pull_marker(self) -> None:
        marker = self.staging / CORRUPT_MARKER
        try:
            data = get_bytes(self.dest.join(CORRUPT_MARKER), self.policy, ADVICE)
        except FileNotFoundError:
            return
        self.staging.mkdir(parents=True, exist_ok=True)
        write_atomic(marker, data.decode("utf-8", errors="replace"))

    def upload_soon(self, name: str, written: bool = True) -> None:
        """Upload data file `name` and its sidecar from staging in the background (a build's per-finished-file
        hook: `written`, it was made now, so every object goes up, replacing a damaged one of the same size);
        commit() waits for it."""
        self.pending[name] = self.pool.submit(self.upload, name, written)

    def upload(self, name: str, written: bool = False) -> int:
        """Data file `name` and its sidecar: every object where written, else those the bucket lacks (or holds
        at another size); bytes put."""
        stored, put = self.stored(), 0
        for rel, size in self.objects(name).items():
            if written or stored.get(rel, {}).get("size") != size:
                upload(self.staging / rel, self.dest.join(rel), self.policy, ADVICE)
                put += size
        return put

    def objects(self, name: str) -> dict[str, int]:
        """The local files of data file `name` and its sidecar, as object paths relative to the cache, with sizes."""
        path = data_path(self.staging, name)
        files = [*format_of(path).stored_files(path), quads_path(path)]
        return {p.relative_to(self.staging).as_posix(): os.path.getsize(p) for p in files}

    def stored(self) -> dict[str, dict]:
        """The objects under dest as listed before this build uploaded anything (then not listed again)."""
        if self._stored is None:
            self._stored = listing(self.dest)
        return self._stored

    def commit(self) -> PublishReport:
        """Upload what staging's manifest names and dest lacks, check it is all there, put the manifest (the commit),
        then delete the objects of data files it does not name."""
        manifest = Manifest.load(self.staging)
        names = [e.name for e in manifest.files]
        for name in names:
            if name not in self.pending:
                self.upload_soon(name, written=False)
        for name in names:
            put = self.pending.pop(name).result()
            self.report.uploaded_files += put > 0
            self.report.uploaded_bytes += put
        self.report.stored_files = len(names) - self.report.uploaded_files
        now = listing(self.dest)
        expected = {rel: size for n in names for rel, size in self.objects(n).items()}
        wrong = [rel for rel, size in expected.items() if now.get(rel, {}).get("size") != size]
        if wrong:
            raise RemoteError(f"{self.dest.join(wrong[0])}: not stored as uploaded ({len(wrong)} object(s)); the "
                              f"manifest was not put, the previous cache stands. {ADVICE}")
        put_bytes((self.staging / MANIFEST).read_bytes(), self.dest.join(MANIFEST), self.policy, ADVICE)
        self.report.deleted_files = self._delete_unnamed(now, {rel.split("/")[1] for rel in expected})
        if CORRUPT_MARKER in now and not (self.staging / CORRUPT_MARKER).exists():   # the build redid those files
            fs = filesystem(self.dest)
            retrying(lambda: fs.rm_file(self.dest.join(CORRUPT_MARKER).url), str(self.dest), self.policy, ADVICE)
        return self.report

    def _delete_unnamed(self, stored: dict[str, dict], keep: set[str]) -> int:
        """Objects under dest/data of names a build writes (never anything else) that the new manifest does not
        name; the count of data files among them."""
        fs, gone, tops = filesystem(self.dest), [], set()
        for rel in sorted(stored):
            folder, _, rest = rel.partition("/")
            top = rest.split("/")[0]
            if folder != DATA_DIR or top in keep or not OWN_FILE.fullmatch(TEMP_UPLOAD.sub("", top)):
                continue
            gone.append(self.dest.join(rel).url)
            tops.add(top)
        if gone:
            retrying(lambda: fs.rm(gone), str(self.dest.join(DATA_DIR)), self.policy, ADVICE)
        return sum(not t.endswith(".npz") for t in tops)


@contextmanager
def publishing(dest: Location, staging: Path | None = None, break_lock: bool = False, jobs: int = 4,
               policy: RetryPolicy = DEFAULT_RETRY) -> Iterator[Publisher]:
    """A build for dest: the bucket lock held, the staging folder (default_staging where None) filled from dest,
    then the block builds into publisher.staging (calling upload_soon per finished file), and commit() runs when
    it ends without an error. An error leaves the cache at dest as it was."""
    with bucket_lock(dest, break_lock, policy), Publisher(dest, staging or default_staging(dest), jobs, policy) as pub:
        pub.pull()
        yield pub
        pub.commit()
