"""The east-cache command (also `python -m preprocess`): build, convert, info, verify, bench, show, evaluate, review,
ensemble, split, pseudo, check, runs.

The command-line front, the one module that dispatches to every side: the build side's commands (store, tools,
convert), the predictions' (evaluate, review, ensemble: east_cache/evaluate/) and, imported only inside their
subcommands, the reader's (bench, show CACHE) and the model's. Fills a BuildConfig from flags; imports no torch (only `bench` and `show CACHE` load it, when they
run).
"""
from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path

from east_cache.augment import add_flags as add_augment_flags, given
from east_cache.bounds import COUNT, COUNT_OR_ZERO, NON_NEGATIVE, SEED, WORKERS, flag_number, flag_numbers
from east_cache.config import (
    AUTO,
    CROP_MODES,
    DEFAULT_IGNORE_TAGS,
    GEOMETRY_MODES,
    HEIGHT_JITTER,
    IMAGE_CHROMAS,
    IMAGE_CODECS,
    IMAGE_QUALITY,
    INPUT_SIZE,
    JOBS,
    MAP_SCALES,
    MAX_ROTATION,
    STRATEGIES,
    BuildConfig,
)
from east_cache.convert import FORMATS_HELP
from east_cache.convert import add_arguments as add_convert_args   # flags and format names only: no reader
from east_cache.errors import CACHE_COMMAND as COMMAND   # the console script; MODULE_COMMAND, run from a checkout
from east_cache.errors import MODULE_COMMAND, CommandParser, cache_command_named, invoked_as, run_command
from east_cache.location import Location, flag_location, is_remote
from east_cache.store.remote.local_cache import add_local_cache_args, local_settings
from east_cache.store.formats import FILE_FORMATS
from east_cache.store.selection import add_flags as add_selection_flags
from east_cache.tools import check, pseudo, split
from east_cache.tools.coverage import TRAIN_EPOCHS

SHOW_SKIPPED = 5   # bad images named at the end of a --skip-bad build; `info` lists them all
DESCRIPTION = ("Build a cache of ready-made EAST training samples (crops, score and geometry maps) from UFO-annotated "
               "images once, then inspect, check and benchmark it. `{}` is the same command.")
BUILD_DESCRIPTION = ("Build a cache, or update the one at --out. Updating, every option not given keeps the value "
                     "the cache was built with (all but --jobs, --backend, --scheduler and --quiet), so `build --out "
                     "CACHE` alone brings it up to date; the defaults below are those of a new cache. The plan "
                     "(strategy and why, counts, size, what changed) is printed before any work starts.")
BUILD_INTERRUPTED = ("interrupted: the previous cache, if any, is intact; run the same command again to finish "
                     "(it reuses the finished files, and the finished samples of an unfinished npy file)")


def add_build_args(p: argparse.ArgumentParser) -> None:
    """Every flag that the cache records defaults to None: unset takes the existing cache's value (build/request.py),
    so each help text states the default of a first build itself."""
    d = BuildConfig()
    kept = " (default {})".format
    p.add_argument("--data", action="append", type=flag_location, metavar="DIR",
                   help="dataset root holding ufo/{split}.json and images/ (or img/{split}/), a folder or a URL "
                        "(s3://bucket/set, read through fsspec: pip install \"east-cache[remote]\"); repeatable. "
                        "Default: a synthetic sample set, which the first build without --data generates into "
                        "./sample_data")
    p.add_argument("--split", help="which ufo/{split}.json to read" + kept("train"))
    p.add_argument("--name", action="append", dest="names", metavar="NAME",
                   help="the source name of each --data root, once per --data in order: what east-train --split and "
                        "--repeat call it (default: the root's folder name; an update keeps the names recorded)")
    p.add_argument("--out", type=flag_location, default=Path("cache"),
                   help="cache directory, or a URL (s3://bucket/prefix: built in --staging, each file uploaded when "
                        "finished, the manifest last); an existing cache there is updated with its own options, "
                        "except those given here (default: cache/)")
    p.add_argument("--staging", type=Path, metavar="DIR",
                   help="with --out URL: the folder the build writes before uploading, kept for the next build (with "
                        "--backend dask, on storage every worker sees) (default: ~/.cache/east-cache/build-HASH)")
    p.add_argument("--break-lock", action="store_true",
                   help="with --out URL: delete the lock object a build that died left there (a live build's lock "
                        "too: be sure it died) (default: off)")
    p.add_argument("--strategy", choices=(AUTO, *STRATEGIES),
                   help="records per file: whole = one file, image = one per image, batch = one per training batch, "
                        "chunked = --chunk-size per file; auto picks from cache size vs RAM and keeps an existing "
                        "cache's while nothing else changes; a rebuild keeps a strategy you named (default auto)")
    p.add_argument("--chunk-size", type=flag_number(COUNT), help="samples per file, chunked" + kept(d.chunk_size))
    p.add_argument("--format", dest="file_format", choices=FILE_FORMATS,
                   help="data files: npy, memory-mapped records (fastest to read); zarr, one zarr v3 group per chunk "
                        "file, one shard per field, score/geometry/ROI maps zstd-compressed and images raw (chunked "
                        "strategy only). One worker writes a whole zarr chunk file from memory: pick --chunk-size so "
                        "that chunk-size x sample size fits in a worker's RAM (default npy; a rebuild keeps the "
                        "cache's format where it holds the strategy)")
    p.add_argument("--batch-size", type=flag_number(COUNT),
                   help="samples per file, batch strategy; use your training batch size" + kept(d.batch_size))
    p.add_argument("--variants", type=flag_number(COUNT),
                   help="augmented variants cached per image (--geometry build or --crop build); epoch e reads "
                        "variant (e + offset) mod K" + kept(d.variants))
    p.add_argument("--image-size", type=flag_number(COUNT), help="long side after resizing, px" + kept(d.image_size))
    p.add_argument("--input-size", type=flag_number(INPUT_SIZE), help="square crop side, px" + kept(d.input_size))
    p.add_argument("--map-scale", type=float, choices=MAP_SCALES,
                   help="target map resolution / input: 0.5 for a stride-2 head, 0.25 for stride 4" + kept(d.map_scale))
    p.add_argument("--seed", type=flag_number(SEED), help="seed of every random draw" + kept(d.seed))
    p.add_argument("--height-jitter", type=flag_number(HEIGHT_JITTER),
                   help="height scaled by U[1-j, 1+j]" + kept(d.height_jitter))
    p.add_argument("--max-rotation", type=flag_number(MAX_ROTATION),
                   help="rotation drawn from U[-r, r] degrees" + kept(d.max_rotation))
    p.add_argument("--crop", choices=CROP_MODES,
                   help="read: cache each variant's warped page (about 2.5x a crop's bytes) and cut a new crop from it "
                        "every epoch, around a legible word; build: cache one crop per variant, the same every epoch "
                        "(smallest cache; zarr needs it). `info` prints how many words each shows" + kept(d.crop))
    p.add_argument("--geometry", choices=GEOMETRY_MODES,
                   help="--crop read: where the height jitter and rotation are drawn. read: every epoch, by the "
                        "reader, from a page stored resized only (each image seen at a new angle and aspect ratio "
                        "every epoch; --variants 1); build: once per variant at build time, the page stored warped "
                        "(crops read by slicing, several times faster, one angle per variant)" + kept(d.geometry))
    p.add_argument("--image-codec", choices=(AUTO, *IMAGE_CODECS),
                   help="how a page's image is stored (--crop read): raw tiles, read at memory speed with nothing to "
                        "decode; jpeg, JPEG tiles of 128 px (a cache near the photos' own size; each crop decodes "
                        "the tiles it covers, in the loader workers or on the GPU); auto: raw while the raw cache fits "
                        "in half the available RAM, else jpeg, and an existing cache's while nothing else changes "
                        "(default auto)")
    p.add_argument("--image-quality", type=flag_number(IMAGE_QUALITY),
                   help="JPEG quality 1..100 of --image-codec jpeg pages" + kept(d.image_quality))
    p.add_argument("--image-chroma", choices=IMAGE_CHROMAS,
                   help="chroma of --image-codec jpeg pages: 420, colour at half resolution both ways (text edges "
                        "live in the brightness, kept whole; smaller and faster to decode); 444, colour at full "
                        "resolution, for text that differs from its ground by colour alone" + kept(d.image_chroma))
    p.add_argument("--levels", action=argparse.BooleanOptionalAction, help="--geometry read: store each page's half "
                   "level too (a quarter more bytes), which crops drawn at --scale < 0.71 read faster; without it they "
                   "read the page itself at 1/2 (JPEG tiles decoded at 1/2, raw px averaged)" + kept("off"))
    p.add_argument("--crop-tries", type=flag_number(COUNT),
                   help="--crop build: random crops tested for cutting no legible word before the least-cutting one "
                        "is taken" + kept(d.crop_tries))
    p.add_argument("--ignore-tags", help="comma-separated word tags that make a don't-care region"
                                         + kept(",".join(DEFAULT_IGNORE_TAGS)))
    p.add_argument("--min-area", type=flag_number(NON_NEGATIVE),
                   help="px^2; smaller words become don't-care" + kept(d.min_area))
    p.add_argument("--drop-area", type=flag_number(NON_NEGATIVE),
                   help="px^2; smaller words are dropped" + kept(d.drop_area))
    p.add_argument("--fit-polygons", action=argparse.BooleanOptionalAction,
                   help="fit words with 5+ points to a min-area quad instead of don't-care" + kept("off"))
    p.add_argument("--jobs", type=flag_number(JOBS), default=-1,
                   help="parallel worker processes, -1 or >= 1 (joblib; default -1 = all cores, with dask all the "
                        "cluster's threads)")
    p.add_argument("--backend", choices=("loky", "dask"), default="loky",
                   help="who runs the jobs: loky, processes on this machine; dask, the workers of the dask.distributed "
                        "cluster at --scheduler (pip install -e \".[dask]\"). With dask, --data and --out must be on "
                        "storage that every worker sees under the same path (a shared file system), and this package "
                        "importable on every worker (default loky)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --backend dask: the scheduler, e.g. tcp://HOST:8786 (default: none)")
    p.add_argument("--check-content", action=argparse.BooleanOptionalAction,
                   help="fingerprint images by their bytes instead of size + mtime (slower, catches same-size edits)"
                        + kept("off"))
    p.add_argument("--skip-bad", action=argparse.BooleanOptionalAction,
                   help="go on past bad images instead of stopping: a missing image or annotation entry is left out; "
                        "an image that cannot be decoded keeps its place as an all-don't-care sample (no loss). "
                        "Both are named at the end of the build and by `info`" + kept("off"))
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (default: off)")


def cmd_build(a: argparse.Namespace) -> int:
    say = (lambda *m: None) if a.quiet else (lambda *m: print(*m, file=sys.stderr))
    if (a.backend == "dask") != (a.scheduler is not None):
        print("error: --backend dask and --scheduler ADDRESS go together", file=sys.stderr)
        return 2
    dest = Location.parse(a.out)
    from east_cache.build.request import refuse_build_over_inputs
    refuse_build_over_inputs(a, dest)
    if not dest.remote:
        if a.staging is not None or a.break_lock:
            print("error: --staging and --break-lock go with --out URL", file=sys.stderr)
            return 2
        return build_into(a, str(a.out), say)
    from east_cache.build.publish import publishing
    with publishing(dest, a.staging, a.break_lock) as pub:
        say(f"cache {dest}: built in {pub.staging}, each file uploaded once finished, the manifest last")
        if pub.unpulled:
            say(f"{len(pub.unpulled)} stored file(s) could not be fetched or failed their check: made again")
        code = build_into(argparse.Namespace(**{**vars(a), "out": pub.staging}), str(dest), say, pub.upload_soon)
    r = pub.report
    say(f"cache {dest}: uploaded {r.uploaded_files} file(s) ({r.uploaded_bytes / 2**20:,.1f} MiB), "
        f"{r.stored_files} stored already; {r.deleted_files} file(s) of the previous build deleted")
    say(pub.staging_note())
    return code


def build_into(a: argparse.Namespace, shown: str, say, on_file=None) -> int:
    """The build into the local folder a.out; messages name the cache `shown` (its URL, building for one)."""
    from east_cache.build.request import print_plan, resolve, result_line
    from east_cache.build.run import build_cache
    from east_cache.build.cluster import dask_client
    from east_cache.tools.leak import warn_build
    req = resolve(a)
    data = req.data
    if not data:
        from east_cache.tools.sampledata import sample_for_build
        data = [sample_for_build(say)]
    with dask_client(a.scheduler) if a.backend == "dask" else nullcontext():
        r = build_cache(req.config, data, a.out, split=req.split, jobs=a.jobs, quiet=a.quiet,
                        check_content=req.check_content, skip_bad=req.skip_bad, backend=a.backend,
                        file_format=req.file_format, on_plan=None if a.quiet else print_plan, on_file=on_file,
                        names=a.names)
    warn_build(data, req.split, a.out, say, a.quiet)   # images hashed into the cache where a run could leak (folds, val)
    if not a.quiet:   # a root that adds nothing
        from east_cache.tools.advice import empty_root_warning
        for warning in filter(None, (empty_root_warning(root, req.split) for root in data)):
            say(f"warning: {warning}")
    say(result_line(r, shown))
    if r.up_to_date:
        return 0
    if r.cleanup_error:
        print(f"warning: the new cache is complete, but removing the previous build's files failed ({r.cleanup_error});"
              f" the next build removes them", file=sys.stderr)
    if r.skipped:
        from east_cache.errors import skipped_reason
        shown_bad = "; ".join(f"{name}: {skipped_reason(why)}" for name, why in r.skipped[:SHOW_SKIPPED])
        more = f"; and {len(r.skipped) - SHOW_SKIPPED} more" if len(r.skipped) > SHOW_SKIPPED else ""
        say(f"{len(r.skipped)} bad image(s) left out or blanked ({shown_bad}{more}); "
            f"`{a.prog_name} info {shown}` lists them")
    if not a.quiet:
        _say_coverage(a.out, req.config, say)
    return 0


def _say_coverage(out: Path, cfg: BuildConfig, say) -> None:
    """What the training crops will show, and a warning when most show no text (the plan warned about the rest)."""
    from east_cache.tools.advice import text_free_warning
    from east_cache.store.manifest import Manifest
    from east_cache.tools.coverage import cache_coverage
    cov, replayed = cache_coverage(out, sorted({1, 5, 20, TRAIN_EPOCHS}))
    images = len(Manifest.load(out).images)
    say(f"coverage: {cov.describe()}" + (f" (estimated on {replayed} of {images} images)" if replayed < images else ""))
    warning = text_free_warning(cov, cfg, cfg.crop)
    if warning:
        say(f"warning: {warning}")


def cmd_convert(a: argparse.Namespace) -> int:
    from east_cache.convert.run import convert, describe   # lazy: the readers load only for `convert`
    url = next((v for v in (a.src, a.out, a.images) if is_remote(v)), None)
    if url is not None:
        print(f"error: {Location.parse(url)}: convert reads and writes local folders; convert into a folder, copy it "
              f"to the bucket, then build with --data URL", file=sys.stderr)
        return 2
    s = convert(a.fmt, a.src, a.out, split=a.split, copy=a.copy, prefix=a.prefix, skip_bad=a.skip_bad,
                force=a.force, images=a.images, subset=a.subset)
    if not a.quiet:
        print(describe(a.fmt, a.src, a.out, a.split, a.copy, s), file=sys.stderr)
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    from east_cache.tools.info import describe
    if is_remote(a.cache):
        from east_cache.tools.remote import describe_at
        print(describe_at(Location.parse(a.cache), a.json, a.epochs, local_settings(a.local_cache)))
        return 0
    print(describe(a.cache, as_json=a.json, epochs=a.epochs, augment=given(a), split=a.split, repeat=a.repeat))
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    if is_remote(a.cache):
        from east_cache.tools.remote import verify_command
        return verify_command(Location.parse(a.cache), local_settings(a.local_cache, a.local_cache_limit), a.prog_name)
    from east_cache.tools.verify import run   # lazy: the codecs load only for verify
    return run(a.cache)


def cmd_bench(a: argparse.Namespace) -> int:
    from east_cache.train.train import training_loader   # train.py's own loader, beside a loop of your own
    from east_cache.inspect.bench import default_workers, run   # imports torch: only when benchmarking
    from east_cache.inspect.bench_loops import loops_report
    from east_cache.inspect.bench_augment import augment_report   # --augment: what a recipe costs a worker core
    if a.augment is not None:
        return print(augment_report(a.cache, a.augment, augment=given(a))) or 0
    workers = a.workers or default_workers()
    print(run(a.cache, workers, a.batch_sizes, a.batches, given(a)), flush=True)
    print("\n" + loops_report(a.cache, workers, a.batch_sizes, a.batches, a.device,
                              lambda *loader: training_loader(*loader, augment=given(a))))
    return 0


def cmd_show(a: argparse.Namespace) -> int:
    try:
        if a.source is not None:
            from east_cache.inspect.show import show_source   # a sample made now: no reader, no torch
            if a.name is None or a.cache is not None:
                raise ValueError("--source DATA needs --name IMAGE and no CACHE INDEX")
            cfg = BuildConfig(input_size=a.input_size or BuildConfig.input_size, map_scale=a.map_scale, seed=a.seed)
            show_source(a.source, a.name, a.split, cfg, a.variant, a.out)
        else:
            from east_cache.inspect.show import show_cached   # imports torch: only when a cached sample is shown
            if a.cache is None or a.index is None:
                raise ValueError("give CACHE INDEX, or --source DATA --name IMAGE")
            show_cached(a.cache, a.index, a.variant, a.out, a.epoch, a.local_cache, a.local_cache_limit, a.epochs,
                        a.augment, given(a))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot write {a.out}: {e.strerror or e}; give -o a file in a folder that exists and that you "
              f"can write to", file=sys.stderr)
        return 2
    print(a.out)
    return 0


def get_parser(prog: str = COMMAND) -> argparse.ArgumentParser:
    from east_cache.evaluate import ensemble, review, scoring   # their flags: numpy and DetEval, no torch
    from east_cache.tools import runs   # runs' flags: no torch
    other = COMMAND if prog != COMMAND else MODULE_COMMAND
    p = CommandParser(prog=prog, description=DESCRIPTION.format(other))
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build or update a cache (only what changed is redone)",
                       description=BUILD_DESCRIPTION)
    add_build_args(b)
    b.set_defaults(func=cmd_build)
    c = sub.add_parser("convert", help="another text-detection format to a UFO dataset root for --data",
                       epilog=FORMATS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_convert_args(c)
    c.set_defaults(func=cmd_convert)
    i = sub.add_parser("info", help="describe a cache: strategy, counts, sizes, config, ingest summary")
    i.add_argument("cache", type=flag_location, help="cache directory or URL")
    add_local_cache_args(i, limit=False)
    i.add_argument("--json", action="store_true", help="print the manifest summary as JSON")
    i.add_argument("--epochs", type=flag_number(COUNT), default=TRAIN_EPOCHS,
                   help=f"epochs to report word coverage for (default {TRAIN_EPOCHS}, train.py's default)")
    add_augment_flags(i, "coverage of crops that draw")
    add_selection_flags(i, "the per-source table of a run that")
    i.set_defaults(func=cmd_info)
    v = sub.add_parser("verify", help="recompute checksums; exit 1 when a file is corrupt or missing")
    v.add_argument("cache", type=flag_location, help="cache directory or URL (whose files are downloaded to check)")
    add_local_cache_args(v)
    v.set_defaults(func=cmd_verify)
    bn = sub.add_parser("bench", help="DataLoader throughput over workers x batch sizes, cold and warm, vs memcpy; "
                                      "then train.py's reading beside a loop of your own through east_cache.Loader")
    bn.add_argument("cache", type=flag_location, help="cache directory or URL")
    bn.add_argument("--workers", type=flag_numbers(WORKERS), default=None,
                    help="comma-separated DataLoader worker counts (default: 0,1,2,4,... up to the core count)")
    bn.add_argument("--batch-sizes", type=flag_numbers(COUNT), default=[4, 8], help="comma-separated batch sizes (default 4,8)")
    bn.add_argument("--batches", type=flag_number(COUNT), default=None,
                    help="batches timed per setting and pass (default: as many as fit in about 2 s)")
    bn.add_argument("--device", help="where the Loaders of the second table put their batches, as train.py's "
                                     "--device (default: cuda when there is one, else cpu)")
    bn.add_argument("--augment", metavar="RECIPE", help="instead: a worker core's crops per CPU second without and "
                    "with this recipe (east-train --augment's), and each transform's share (default: none)")
    add_augment_flags(bn, "crops timed that draw")
    bn.set_defaults(func=cmd_bench)
    d = BuildConfig()
    sh = sub.add_parser("show", help="draw one sample (crop, score, words, geometry, ROI) into a PNG")
    sh.add_argument("cache", type=flag_location, nargs="?", help="cache directory or URL")
    add_local_cache_args(sh)
    sh.add_argument("index", nargs="?", help="image index (in name order, as the Dataset numbers them) or image name")
    sh.add_argument("--variant", type=flag_number(COUNT_OR_ZERO), default=0,
                    help="augmented variant to draw (default 0)")
    sh.add_argument("--epoch", type=flag_number(COUNT_OR_ZERO), default=0,
                    help="--geometry read: the epoch whose crop to draw (default 0)")
    sh.add_argument("--epochs", type=flag_numbers(COUNT_OR_ZERO), metavar="A-B|A,B,...", help="--geometry read: a "
                    "contact sheet of the image's crops at these epochs, e.g. 0-7 (default: one crop, --epoch)")
    sh.add_argument("--augment", metavar="RECIPE", help="a contact sheet (--epochs, else --epoch) of the crops made by "
                    "this recipe (east-train --augment's) (default: none)")
    sh.add_argument("-o", "--out", type=Path, required=True, help="PNG file to write")
    sh.add_argument("--source", type=Path, metavar="DATA",
                    help="instead of a cache: dataset root; draws page --name with its words and its sample made now "
                         "(default: none, draw from CACHE)")
    sh.add_argument("--name", help="with --source: image file name as in the UFO JSON (no default: needed there)")
    sh.add_argument("--split", default="train", help="with --source: which ufo/{split}.json to read (default: train)")
    add_augment_flags(sh, "the crop drawn at --epoch draws (--source: --input-size only)")
    sh.add_argument("--map-scale", type=float, choices=MAP_SCALES, default=d.map_scale,
                    help=f"with --source: target map resolution / input (default {d.map_scale})")
    sh.add_argument("--seed", type=flag_number(SEED), default=d.seed,
                    help=f"with --source: seed of the random draws (default {d.seed})")
    sh.set_defaults(func=cmd_show)
    ev = sub.add_parser("evaluate", help="score UFO predictions against UFO ground truth: DetEval precision, "
                                         "recall, hmean")
    scoring.add_arguments(ev)
    ev.set_defaults(func=scoring.run)
    for tool in (split, pseudo, check, review, ensemble, runs):   # each registers its own subcommand: flags, help, run
        tool.register(sub)
    return p


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's time limit, `kill`) ends a build like Ctrl-C: temp files removed, workers stopped."""
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    prog = prog or (invoked_as(sys.argv[0]) if argv is None else COMMAND)
    with cache_command_named(prog):   # every help text and hint of this run names the command as it was run
        args = get_parser(prog).parse_args(argv)
        args.prog_name = prog
        build = args.command == "build"
        if build and argv is None:   # the process is ours only when run from the command line
            _interrupt_on_sigterm()
        return run_command(lambda: args.func(args), argv, interrupted=BUILD_INTERRUPTED if build else "interrupted",
                           kept="the previous cache, if any, is unchanged" if build else "")
