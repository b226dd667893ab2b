"""docs/performance.md and the README's headline figures, written from results/*.json by run_all.py: every
figure they quote is one a benchmark printed, never typed in.

Goals come from the project's issues; each is read off a benchmark's parsed tables. A goal whose benchmark has
not run (or that needs a GPU this machine lacks) says so instead of showing a number. The README keeps a few
headline rows between its two markers; docs/performance.md has the goals and every benchmark's output.

    python benchmarks/report.py     # rewrite both from benchmarks/results/*.json alone
"""
from __future__ import annotations

import re
from pathlib import Path

from plot import load, number

START, END = "<!-- headline:start -->", "<!-- headline:end -->"
# The order of the benchmarks, run and in docs/performance.md; benchmarks not listed follow, by name.
ORDER = ("targets", "sample", "codec", "crops", "geometry", "augment", "compare", "gpu_augment", "gpu",
         "time_to_accuracy", "fusion", "loader", "peers", "remote", "rebuild", "selection", "build_memory", "zarr",
         "eval", "check", "review", "ensemble")
# bench_codec's table of the page image codecs' goals (issue 25), rows of (what, goal, measured)
CODEC_GOALS = ("codec", 3)
# bench_geometry's: the read-time geometry's (issue 32), and its draws and read-speed tables
GEOMETRY_GOALS, GEOMETRY_DRAWS, GEOMETRY_READS = ("geometry", 5), ("geometry", 0), ("geometry", 3)


def rows(results: dict, name: str, table: int) -> list[dict[str, str]]:
    """Rows of a benchmark's table as {header: cell}; [] when it has not run or printed no such table."""
    tables = results.get(name, {}).get("tables", [])
    if table >= len(tables):
        return []
    t = tables[table]
    return [dict(zip(t["header"], r)) for r in t["rows"]]


def span(values: list[float], fmt: str) -> str:
    if not values:
        return "not measured"
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)} to {format(hi, fmt)}"


def build_speed_up(build: dict) -> str:
    if "2 jobs" not in build:
        return "not measured"
    alone = build.get("make_sample alone, 2 processes")
    ceiling = f" (the same sample-making alone in 2 plain processes: {alone['speed-up']}x)" if alone else ""
    return f"{build['2 jobs']['speed-up']}x{ceiling}"


def photo_ratio(results: dict, start: str) -> str:
    """The photos cell of bench_sample's ratio row that starts with `start`."""
    found = [r for r in rows(results, "sample", 2) if r["ratio"].startswith(start)]
    return found[0]["photos"] if found else "not measured"


def decode_gain(results: dict) -> str:
    """Camera photos, ms per sample: the decode and make_sample with the old decode and the new, same run."""
    ms = {r["stage"]: r["photos ms"] for r in rows(results, "sample", 1)}
    old, new = ms.get("decode, old (PIL, convert, tobytes)"), ms.get("decode (OpenCV, DCT-scaled, EXIF as a view)")
    if not (old and new and "make_sample" in ms):
        return "not measured"
    return (f"decode {old} -> {new} ms; make_sample {ms['make_sample, old decode']} -> {ms['make_sample']} ms "
            f"({photo_ratio(results, 'make_sample: old decode')})")


STREAMING = ("LitData", "Mosaic Streaming", "WebDataset")   # bench_peers' readers that stream shards


def peers_line(results: dict) -> str:
    readers = {r["reader"]: number(r["x memcpy, median [min-max]"].split()[0]) for r in rows(results, "peers", 0)}
    ours = {k.removeprefix("this project, ").split(" (")[0]: v for k, v in readers.items() if k.startswith("this project")}
    others = [(v, k) for k, v in readers.items() if not k.startswith(("this project", "memcpy"))]
    streaming = [(v, k) for v, k in others if k.startswith(STREAMING)]
    if not ours or not streaming:
        return "not measured (needs the .[peers] extra)"
    (s, s_name), (b, b_name) = max(streaming), max(others)
    mine = ", ".join(f"{mode} {v:.2f}x" for mode, v in ours.items())
    return f"{mine} memcpy; fastest streaming reader, {s_name}: {s:.2f}x; fastest of all, {b_name}: {b:.2f}x"


PREWARPED = "--crop read --geometry build, train.py"   # bench_crops' rows of slice-only page reads


def page_reads(results: dict) -> str:
    """bench_crops: page-mode reading of pre-warped pages (slices, no warp) as train.py does it, x memcpy of the
    bytes an item delivers, per set: over the first timed epochs, and over the late ones where the table has them."""
    cells = []
    for table, where in ((1, "sample set, 1024 px"), (3, "photo-like, 512 px")):
        found = rows(results, "crops", table)
        late = next((k for k in (found[0] if found else {}) if k.startswith("epochs") and k.endswith("memcpy")), None)

        def ratio(r: dict) -> str:
            return r["read / memcpy"] + (f" ({late.removesuffix(' read / memcpy')}: {r[late]})" if late else "")
        reads = {r["mode"]: r for r in found if r["mode"].startswith(PREWARPED)}
        thread = reads.pop(f"{PREWARPED} (targets made on the device)", None)
        if thread:
            cells.append(f"{where}: {ratio(thread)} in this process" +
                         "".join(f", {ratio(r)} with {m.rsplit(', ', 1)[1]}" for m, r in reads.items()))
    return "; ".join(cells) or "not measured"


def goals(results: dict) -> list[list[str]]:
    targets = [number(r["speed-up"]) for r in rows(results, "targets", 0)]
    loader = rows(results, "loader", 0)
    thread = [number(r["x memcpy"]) for r in loader if r["loading in"] == "main process + prefetch thread"]
    fly = [r for r in loader if r["reader"].startswith("on-the-fly")]
    best = max((number(r["samples/s"]) for r in loader if r["reader"] in ("whole", "image", "batch", "chunked")),
               default=None)
    build = {r["build"]: r for r in rows(results, "loader", 2)}
    rebuild = rows(results, "rebuild", 0)
    noop = {r["source images"]: number(r["seconds"]) for r in rebuild if r["operation"].startswith("no-op, quick")}
    edit = [r for r in rebuild if r["operation"].startswith("rebuild after editing")]
    memory = [f"{r['pages']} pages: {r['parent peak RSS (MiB)']} MiB" for r in rows(results, "build_memory", 0)]
    zarr = rows(results, "zarr", 1)
    disk = [r for r in rows(results, "zarr", 0) if r["on disk"] == "total"]
    return [
        ["targets vs the plain per-word reference", ">= 50x", span(targets, ".0f") + "x" if targets else "not measured"],
        ["DataLoader (train.py's feeding) vs memcpy of the same bytes", ">= 0.5x",
         span(thread, ".2f") + "x over the 4 strategies" if thread else "not measured"],
        ["cache vs the on-the-fly Dataset", "reported",
         f"{best / number(fly[0]['samples/s']):.0f}x (best strategy)" if fly and best else "not measured"],
        ["build, 2 jobs vs 1", ">= 1.8x", build_speed_up(build)],
        ["build on camera photos, per extra sample, vs its floor (decode + warp + targets)", "<= 1.3x",
         photo_ratio(results, "build per extra sample / floor")],
        ["on-the-fly baseline pipeline vs the build per extra sample, camera photos", ">= 30x",
         photo_ratio(results, "baseline / build")],
        ["camera photos per sample, the decode before OpenCV -> now (same run)", "reported", decode_gain(results)],
        ["page-mode reading of pre-warped pages (--crop read --geometry build), train.py's path, vs memcpy of the "
         "bytes an item delivers", ">= 0.7x", page_reads(results)],
        ["train.py's reader vs the tools users would pick (x memcpy, warm)", "ahead of every streaming reader",
         peers_line(results)],
        ["no-op rebuild, 10k source images, process start included", "< 3 s",
         f"{noop['10000']:.2f} s (1k: {noop.get('1000', float('nan')):.2f} s)" if "10000" in noop else "not measured"],
        ["rebuild after editing 1 of 1k images", "reported",
         f"{edit[0]['seconds']} s = {edit[0]['x full build']} x the full build" if edit else "not measured"],
        ["parent peak RSS, 50 vs 400 pages", "does not grow", "; ".join(memory) or "not measured"],
        ["zarr vs npy chunked: size on disk, samples/s", "reported",
         "; ".join([f"npy {d['npy MiB']} MiB, zarr {d['zarr MiB']} MiB" for d in disk]
                   + [f"{r['format']}: {r['DataLoader samples/s']} samples/s" for r in zarr]) or "not measured"],
        ["train.py's share of step time waiting for data, on a GPU, epochs after the first, pages stored resized "
         "(the default): the baseline's augmentation and everything on", "< 2%", augment_wait(results)],
        ["the same with a team's albumentations recipe (six transforms), train.py's workers and more", "reported",
         recipe_wait(results)],
        ["nvJPEG batched decoding vs the CPU workers (jpeg pages)", ">= their crops/s, fewer cores busy",
         nvjpeg_line(results)],
        ["full-image prediction of 1600x2200 pages at steady state, fp16", "<= 0.05 s/image on a GPU",
         predict_line(results)],
        ["time to the same hmean: cache vs on the fly (vs the baseline's way)", "reported", accuracy_line(results)],
        ["two fold models: east-predict --fuse maps vs --fuse quads (and ensemble of their files), hmean",
         "the higher one is the default", fusion_line(results)],
        ["review page: build for 500 images, load in a browser", "reported", review_line(results)],
        *([r["what"], r["goal"], r["measured"]] for r in rows(results, *CODEC_GOALS)),
        ["check: planted copies (resized, re-encoded, cropped 2-5%, brightened) found; images/s", "reported",
         check_line(results)],
        *([r["what"], r["goal"], r["measured"]] for r in rows(results, *GEOMETRY_GOALS)),
        *compare_goals(results),
    ]


WORK = "working tree"   # compare.py's name for the tree it runs in


def per_extra_photo(results: dict) -> dict[str, dict[str, str]]:
    """compare.py's rows of the working tree's build per extra camera photo at the default codec, by clock."""
    return {r["clock"]: r for r in rows(results, "compare", 2) if r["tree"] == WORK and r["codec"].startswith("raw (")}


def compare_goals(results: dict) -> list[list[str]]:
    """compare.py (issue 48): the default build's wall time and bytes against each earlier revision, on rendered
    pages and camera photos; the build per extra camera photo against its floor and the on-the-fly baseline; the
    read rates against each revision. Nothing where it has not run."""
    builds = rows(results, "compare", 0)
    if not builds:
        return []
    revs = [k.removeprefix(f"{WORK} / ").removesuffix(", s") for k in builds[0]
            if k.startswith(f"{WORK} / ") and k.endswith(", s")]
    kinds = {r["data, options"]: r for r in builds}
    out = []
    for rev in revs:
        cells = [f"{label}: {kinds[label][f'{WORK} / {rev}, s']} time, {kinds[label][f'{WORK} / {rev}, MB']} bytes"
                 for label in ("rendered pages", "camera photos") if label in kinds]
        out.append([f"the default build, working tree / {rev}: wall time (median [min-max] of rounds), cache bytes",
                    "<= 1 (bytes <= 1.05)", "; ".join(cells)])
    extra = per_extra_photo(results)
    if {"wall", "CPU"} <= set(extra):
        out.append(["the build per extra camera photo (default codec) / its floor (decode + resize + write)", "<= 1.5x",
                    f"wall {extra['wall']['build / floor']}, CPU {extra['CPU']['build / floor']}"])
        out.append(["on-the-fly baseline's sample / the build per extra camera photo", ">= 12x",
                    f"wall {extra['wall']['baseline / build']}, CPU {extra['CPU']['baseline / build']}"])
    reads = rows(results, "compare", 4)
    for rev in revs:
        # the baseline geometry from the default build's cache; all on (scale < 1 too) from the cache a run that
        # shrinks its crops builds, with --levels, where compare.py read one, and from the default one beside it
        key, cells = f"{WORK} / {rev}", []
        for r in reads:
            if r.get(key, "n/a") == "n/a":
                continue
            codec, levels = r["cache"].split(", ")[0], ", " in r["cache"]
            if r["arm"].endswith("baseline") and not levels:
                cells.append(f"{codec} {r['arm']}: {r[key]}")
            elif r["arm"].endswith("all on"):
                cells.append(f"{codec} {r['arm']}{' (--levels)' if levels else ' (without --levels)'}: {r[key]}")
        if cells:
            out.append([f"crops per CPU s of a loader worker, working tree / {rev}", ">= 1 (all on: with --levels)",
                        "; ".join(cells)])
    return out


def check_line(results: dict) -> str:
    """bench_check: recall on planted copies and false pairs at check's threshold; images/s on 12 MP JPEGs; the
    build's train/val check over the build's time, first and on a rebuild."""
    chosen = [r for r in rows(results, "check", 0) if "(check's)" in r["distance"]]
    speed = [r for r in rows(results, "check", 2) if r["MP"] == "12"]
    if not chosen:
        return "not measured"
    r = chosen[0]
    pooled = [v for k, v in (speed[0] if speed else {}).items() if k.startswith("images/s, ") and "threads" in k]
    rate = pooled[0] if pooled else "?"
    build = [b["x build"] for b in rows(results, "check", 3)]
    cost = (f"; the build's train/val check: {build[0]}x a first build's time, {build[1]}x on a rebuild"
            if len(build) == 2 else "")
    return (f"distance {r['distance'].split()[1]}: recall {r['recall, all copies']} (cropped 5%: {r['cropped 5%']}), "
            f"false pairs {r['false pairs among distinct images']}; 12 MP JPEGs: {rate} images/s{cost}")


def review_line(results: dict) -> str:
    """bench_review: seconds to build the page and its load time in headless Chromium, per set."""
    found = rows(results, "review", 0)
    return "; ".join(f"{r['set']}, {r['images']} images: built in {r['build s']} s ({r['KiB per PNG']} KiB per "
                     f"PNG), loads in {r['load ms']} ms" for r in found) or "not measured"


def having(results: dict, name: str, column: str) -> list[dict[str, str]]:
    """Rows of the first table of a benchmark's output that has `column`; [] when none has."""
    for t in results.get(name, {}).get("tables", []):
        if column in t["header"]:
            return [dict(zip(t["header"], r)) for r in t["rows"]]
    return []


def on_device(results: dict, name: str, text: str) -> str:
    """text with the machine it was measured on; a figure measured without a GPU says so first."""
    where = results[name]["machine"]
    cpu = "no GPU" in where or not any(w in where for w in ("NVIDIA", "GPU", "device"))
    return f"{'CPU only, not a GPU figure: ' if cpu else ''}{text} ({where})"


GPU_RUN = "not measured (needs a CUDA device: bash benchmarks/gpu_session.sh)"


def recorded(results: dict, name: str) -> str:
    """', recorded DATE' of a benchmark's result."""
    return f", recorded {results[name]['date']}"


def augment_rows(results: dict, arm: str | None = None) -> list[dict[str, str]]:
    """bench_gpu_augment's summary rows (the table with a goal column), of one arm (None: all), measured ones only."""
    return [r for r in having(results, "gpu_augment", "goal") if (arm is None or r["arm"] == arm)
            and r["samples/s"][:1].isdigit()]


def augment_cells(found: list[dict[str, str]], goal: bool = False) -> str:
    return "; ".join(f"{r['codec']} pages: {r['samples/s']} samples/s, {r['waiting']} waiting"
                     + (f" ({'met' if r['met'] == 'yes' else 'missed'})" if goal and r["met"] else "")
                     + f", {r['reading']}, {r['busy CPU cores']} cores busy" for r in found)


def augment_wait(results: dict) -> str:
    """bench_gpu_augment: the wait of the baseline's augmentation and of everything on, per codec, against the goal;
    before that benchmark ran, bench_gpu's steady state."""
    arms = [(arm, augment_rows(results, arm)) for arm in ("baseline", "all-on")]
    if not any(found for _, found in arms):
        return gpu_wait(results)
    return on_device(results, "gpu_augment", "; ".join(f"{arm}: {augment_cells(found, goal=True)}"
                                                       for arm, found in arms if found)
                     + recorded(results, "gpu_augment"))


def recipe_wait(results: dict) -> str:
    found = [r for r in augment_rows(results) if r["arm"].startswith("recipe")]
    if not found:
        return GPU_RUN
    arms = {}
    for r in found:
        arms.setdefault(r["arm"], []).append(r)
    return on_device(results, "gpu_augment", "; ".join(f"{arm}: {augment_cells(rows)}" for arm, rows in arms.items())
                     + recorded(results, "gpu_augment"))


def gpu_row(results: dict) -> str:
    """The README's GPU row: train.py on the default cache (pages stored resized, each crop warped at read time) with
    the baseline's augmentation, then everything on and the team recipe, from bench_gpu_augment; before it ran,
    bench_gpu's figure (gpu_wait)."""
    base = augment_rows(results, "baseline")
    if not base:
        return gpu_wait(results)
    workers = sorted({r["reading"] for r in base})
    text = "; ".join(f"{r['codec']} pages {r['samples/s']} samples/s, {r['waiting']} waiting" for r in base)
    text += f" ({', '.join(workers)}, pages stored resized: the default)"
    for arm, what in (("all-on", "everything on (scale, perspective, rotation 20)"),
                      ("recipe", "a six-transform albumentations recipe")):
        found = augment_rows(results, arm)
        if found:
            text += f"; {what}: " + ", ".join(f"{r['codec']} {r['samples/s']}/s, {r['waiting']} waiting"
                                              for r in found)
    return on_device(results, "gpu_augment", text + recorded(results, "gpu_augment"))


def gpu_wait(results: dict) -> str:
    """bench_gpu's steady-state table: samples/s and the share of step time waiting for data after the first epoch,
    per codec."""
    found = having(results, "gpu", "training samples/s")
    if not found:   # a record from before the steady-state arm: the last epoch of a short run
        old = having(results, "gpu", "time waiting for data")
        if not old:
            return GPU_RUN
        when = f"; pre-warped pages, recorded {results['gpu']['date']}, before --geometry read: not re-measured"
        return on_device(results, "gpu", "; ".join(f"{r['codec']} pages: {r['samples/s']} samples/s, "
                                                   f"{r['time waiting for data']} waiting" for r in old)
                         + f" (a short run's last epoch{when})")
    return on_device(results, "gpu", "; ".join(f"{r['codec']} pages: {r['training samples/s']} samples/s, "
                                               f"{r['waiting']} waiting" for r in found))


def nvjpeg_line(results: dict) -> str:
    found = {r["reader"]: r for r in having(results, "gpu", "busy CPU cores")}
    cpu, dev = found.get("jpeg, decoded by the workers"), found.get("jpeg, decoded by nvJPEG")
    if not cpu or not dev or not dev["crops/s"][:1].isdigit():
        return GPU_RUN
    return on_device(results, "gpu", f"nvJPEG {dev['crops/s']} crops/s with {dev['busy CPU cores']} cores busy; "
                                     f"CPU workers {cpu['crops/s']} crops/s with {cpu['busy CPU cores']}")


def predict_line(results: dict) -> str:
    found = having(results, "gpu", "stages' sum, s per image")
    stages = {r["stage"]: r for r in having(results, "gpu", "stage")}
    if not found:
        return GPU_RUN
    ratio = stages.get("map decoding + NMS, before / now", {}).get("share", "")
    return on_device(results, "gpu", f"{found[0]['s per image']} s/image; map decoding + NMS "
                                      f"{ratio or 'not measured'} than before")


def accuracy_line(results: dict) -> str:
    """bench_time_to_accuracy: the time each arm took to the same hmean, where that table was printed; else the
    ratio rows' last sample count."""
    same = having(results, "time_to_accuracy", "x cache")
    if same:
        target = re.search(r"at or above (\d+\.\d+)", results["time_to_accuracy"]["output"])
        cells = ", ".join(f"{r['arm']} {r['seconds']} s ({r['x cache']}, {r['samples seen']} samples)" for r in same)
        return on_device(results, "time_to_accuracy", f"to an hmean of {target.group(1) if target else '?'} (the "
                         f"best every arm reached): {cells}" + recorded(results, "time_to_accuracy"))
    found = having(results, "time_to_accuracy", "samples")
    if not found:
        return GPU_RUN
    last = found[-1]
    cells = ", ".join(f"{k.removesuffix(' hmean')} {v}" for k, v in last.items() if k.endswith(" hmean"))
    times = ", ".join(f"{k.removesuffix(' s')} {v}" for k, v in last.items() if k.endswith(" s"))
    return on_device(results, "time_to_accuracy", f"at {last['samples']} samples: hmean {cells}; seconds {times}")


def fusion_line(results: dict) -> str:
    """bench_fusion: the hmean of each model alone, of --fuse maps and --fuse quads, of ensemble; and its verdict."""
    found = {r["predictions"]: r for r in having(results, "fusion", "hmean")}
    if not found:
        return "not measured (needs a CUDA device: bash benchmarks/gpu_session.sh)"
    verdict = [line for line in results["fusion"]["output"].splitlines() if line.startswith("Fusion: ")]
    cells = "; ".join(f"{k} {r['hmean']}" for k, r in found.items())
    return on_device(results, "fusion", f"{verdict[0].removeprefix('Fusion: ') if verdict else ''} ({cells})"
                     + recorded(results, "fusion"))


def headline(results: dict) -> list[list[str]]:
    """The README's few rows: what a user of the tool weighs first."""
    targets = [number(r["speed-up"]) for r in rows(results, "targets", 0)]
    codec = {r["what"]: r["measured"] for r in rows(results, *CODEC_GOALS)}
    size = [v for k, v in codec.items() if k.startswith("jpeg cache of camera")]
    icdar = [v for k, v in codec.items() if k.startswith("jpeg cache of ICDAR")]
    ratio = [list(r.values())[1:] for r in rows(results, "remote", 2) if list(r.values())[0] == "bucket / local disk"]
    return [
        ["the default build, per extra camera photo (8.7-12 MP), one job", build_row(results)],
        ["EAST targets vs a plain per-word reference", span(targets, ".0f") + "x faster, equal" if targets
         else "not measured"],
        ["a cache of JPEG pages over the camera photos it came from",
         f"{size[0]}x their bytes (ICDAR-like 1280x720 photos: {icdar[0]}x)" if size and icdar else "not measured"],
        ["fresh (height, rotation) draws per image in 20 epochs", fresh_draws(results)],
        ["1024-px crops of camera photos per CPU second of a loader worker", crops_per_core(results)],
        ["the same with the run's whole augmentation on (scale U[0.5, 1], perspective 0.1), over the height and "
         "rotation alone", augmentation_cost(results)],
        ["train.py on a GPU, AMP fp16, loader workers as train.py picks them, 1024-px crops", gpu_row(results)],
        ["a cache in a bucket (a local S3 server), items/s of the first / later epochs over a local cache's",
         " / ".join(f"{v}x" for v in ratio[0]) + "; each machine downloads each file once" if ratio
         else "not measured"],
    ]


def build_row(results: dict) -> str:
    """compare.py: the working tree's build per extra camera photo (default codec, wall), against the on-the-fly
    baseline's sample and the floor, measured in the same rounds."""
    r = per_extra_photo(results).get("wall")
    if r is None:
        return "not measured (python benchmarks/run_all.py --only compare)"
    ms, baseline, floor = (r[k].split(" [")[0] for k in ("build ms per extra photo", "baseline / build", "build / floor"))
    return (f"{ms} ms of wall time, {baseline}x faster than the on-the-fly baseline makes one training sample of it; "
            f"{floor}x its floor (decode, resize, write)")


def fresh_draws(results: dict) -> str:
    """bench_geometry: the fewest distinct (height, rotation) draws of an image in 20 epochs, per mode."""
    least = {}
    for r in rows(results, *GEOMETRY_DRAWS):
        least.setdefault(r["mode"], []).append(int(r["distinct draws / image (least)"]))
    if {"--geometry read", "--geometry build"} - set(least):
        return "not measured"
    return (f"at least {min(least['--geometry read'])} (pages stored resized, the default; pre-warped pages, "
            f"--geometry build: {max(least['--geometry build'])})")


def crops_per_core(results: dict) -> str:
    """bench_geometry: camera photos' 1024-px crops per CPU second of one reading process, per mode and codec."""
    rate = {(r["mode"].split(" (")[0], r["codec"]): r["crops per CPU s (per core)"].split(" [")[0]
            for r in rows(results, *GEOMETRY_READS)
            if r["data, crop"].startswith("camera photos") and r["data, crop"].endswith(", 1024 px")}
    if not {("--geometry read", "raw"), ("--geometry build", "jpeg")} <= set(rate):
        return "not measured"
    return (f"raw pages {rate[('--geometry read', 'raw')]}, JPEG pages {rate[('--geometry read', 'jpeg')]}, each crop "
            f"warped by its epoch's draw (the default); pre-warped pages (--geometry build): raw "
            f"{rate[('--geometry build', 'raw')]} (slices), JPEG {rate[('--geometry build', 'jpeg')]}")


def augmentation_cost(results: dict) -> str:
    """bench_geometry: camera photos' crops per CPU second with scale and perspective on, over the baseline geometry's,
    per crop side and codec (the issue's targets table): from a cache built with --levels, and without (the default,
    where the table has it)."""
    ratio, plain = {}, {}
    for r in rows(results, *GEOMETRY_GOALS):
        what = r["what"]
        if not what.startswith("camera photos"):
            continue
        key = (what.split(": ")[1].split("-px")[0], what.split(", ")[1])
        if "all on / baseline geometry" in what:
            ratio[key] = r["measured"]
        elif "all on from a cache built without --levels" in what:
            plain[key] = r["measured"]
    if not {("1024", "raw"), ("1024", "jpeg")} <= set(ratio):
        return "not measured"
    sides = sorted({s for s, _ in ratio}, key=int, reverse=True)
    text = "; ".join(f"{s} px: raw {ratio[(s, 'raw')]}x, JPEG {ratio[(s, 'jpeg')]}x" for s in sides
                     if (s, "raw") in ratio and (s, "jpeg") in ratio)
    if not {("1024", "raw"), ("1024", "jpeg")} <= set(plain):
        return text
    return (f"{text} (a cache built with --levels; without, the default: 1024 px raw {plain[('1024', 'raw')]}x, JPEG "
            f"{plain[('1024', 'jpeg')]}x)")


def performance_page(results: dict, table) -> str:
    """docs/performance.md: where and when, the goals, then each benchmark's command and output."""
    machines = sorted({r["machine"] for r in results.values()})
    dates = sorted({r["date"] for r in results.values()})
    parts = ["# Performance", "",
             "Written by `python benchmarks/run_all.py` from `benchmarks/results/*.json` (each benchmark's command, "
             "machine, date and printed tables); `--quick` runs small settings, `--only NAME` one benchmark, and "
             "`--record NAME FILE` records the output of a run made on another machine (a GPU). Figures are ratios "
             "against a reference measured in the same run wherever one exists (a memcpy of the same bytes, the "
             "plain implementation, the other codec). compare.py, the build and the read of the working tree against "
             "earlier revisions alternated in one run, is recorded only when named: `run_all.py --only compare`.", "",
             f"Machines: {'; '.join(machines)}. Dates: {dates[0]} to {dates[-1]}.", "",
             "The GPU figures (bench_gpu_augment.py, bench_time_to_accuracy.py, bench_fusion.py, bench_gpu.py) "
             "come from one script run on a machine with an NVIDIA GPU, from the repository root: `bash "
             "benchmarks/gpu_session.sh` (at most 9 minutes on an H200 with 16 cores, each script under a timeout "
             "within the session's). It prints the machine, records each script's output into "
             "`benchmarks/results/NAME.json` and rewrites this page (`run_all.py --record`), also when a script "
             "was cut short; with `OUT=DIR` it copies the results, this page and the session's log there too, and "
             "`WHEELS=DIR` first installs the wheels in DIR for a machine without network. `AUG_ARGS`, `TTA_ARGS`, "
             "`FUSION_ARGS`, `GPU_ARGS` and the matching `*_TIMEOUT` resize it; `bash benchmarks/gpu_session.sh "
             "--quick` is the dry run on a CPU (`--quick --device cpu`), whose figures go to "
             "`benchmarks/results/session/dry-run`, never here.", "",
             "## Goals", "", table(["what", "goal", "measured"], goals(results)), ""]
    for name in sorted(results, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
        r = results[name]
        status = "" if r["returncode"] == 0 else f", FAILED with exit status {r['returncode']}"
        parts += [f"## {script_name(name)}", "",
                  f"`{r['command']}` ({r['mode']} settings; {r['machine']}; {r['date']}; {r['seconds']:.0f} s{status})",
                  "", demoted(r["output"].strip()), ""]
    return "\n".join(parts)


def script_name(name: str) -> str:
    """The file of benchmark `name`: bench_NAME.py, or compare.py."""
    return "compare.py" if name == "compare" else f"bench_{name}.py"


def demoted(text: str) -> str:
    """A benchmark's printed markdown with its headings two levels down, under the page's section for it."""
    return "\n".join("##" + line if line.startswith("#") else line for line in text.splitlines())


def update_readme(readme: Path, results: dict, table) -> bool:
    """Replace the README's headline block; False (and no change) when the markers are missing."""
    text = readme.read_text()
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    block = "\n".join([START, "", "Measured by `python benchmarks/run_all.py` (every table, machine and date: "
                        "[docs/performance.md](docs/performance.md)):", "",
                        table(["what", "measured"], headline(results)), "", END])
    readme.write_text(head + block + rest.split(END, 1)[1])
    return True


def write_reports(repo: Path, results: dict, table) -> None:
    (repo / "docs" / "performance.md").write_text(performance_page(results, table) + "\n")
    update_readme(repo / "README.md", results, table)


if __name__ == "__main__":
    from common import REPO, table
    here = Path(__file__).resolve().parent
    write_reports(REPO, load(here / "results"), table)
    print("docs/performance.md and the README's headline rewritten")
