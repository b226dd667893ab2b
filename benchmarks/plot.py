"""Draws the benchmark results that run_all.py wrote (results/*.json) as one PNG, results.png.

    python benchmarks/plot.py [--results benchmarks/results] [-o benchmarks/results.png]

Panels: target maps and whole samples against the plain reference and baseline (ms, log scale);
loader samples/s per storage strategy against a memcpy and the on-the-fly Dataset (log scale);
rebuild seconds against the number of source images; the build's peak memory against pages; the same records
read by other tools, as a ratio to a memcpy (bench_peers).
Needs matplotlib, an optional extra: pip install -e ".[bench]".
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAST, SLOW = "tab:blue", "tab:gray"


def number(cell: str) -> float:
    """A printed cell as a float: '12x' -> 12.0, '1,234.5' -> 1234.5."""
    return float(cell.rstrip("x").replace(",", ""))


def find_table(result: dict | None, column: str) -> dict | None:
    """The first table of a benchmark's results with that column header, as {header: [cells]}."""
    for t in (result or {}).get("tables", []):
        if column in t["header"]:
            return {h: [r[i] for r in t["rows"]] for i, h in enumerate(t["header"])}
    return None


def speed_panel(ax, results: dict) -> bool:
    """Horizontal bars of the fast and the slow time of each row, speed-up written at the end."""
    ax.set_title("Time per sample\nthis project (blue) vs the plain reference / baseline (grey)")
    rows = []   # (label, fast ms, slow ms, speed-up as printed)
    if t := find_table(results.get("targets"), "reference ms"):
        rows += [(f"targets, map scale {s}\n(dense random crop)", number(f), number(r), x)
                 for s, f, r, x in zip(t["map scale"], t["make_targets ms"], t["reference ms"], t["speed-up"])]
    if t := find_table(results.get("sample"), "baseline ms"):
        rows += [(w.replace(": ", ":\n", 1), number(f), number(b), x)
                 for w, f, b, x in zip(t["what"], t["fast ms"], t["baseline ms"], t["speed-up"])]
    if not rows:
        return False
    y = range(len(rows))
    ax.barh([i - 0.2 for i in y], [r[1] for r in rows], 0.4, color=FAST)
    ax.barh([i + 0.2 for i in y], [r[2] for r in rows], 0.4, color=SLOW)
    for i, r in enumerate(rows):
        ax.text(r[2] * 1.15, i + 0.2, r[3], va="center", fontsize=9)
    ax.set_yticks(list(y), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(right=max(r[2] for r in rows) * 5)   # room for the speed-ups
    ax.set_xlabel("ms per sample (log)")
    return True


def loader_panel(ax, results: dict) -> bool:
    ax.set_title("Loader throughput\ncache strategies (blue) vs memcpy and on-the-fly (grey)")
    if not (t := find_table(results.get("loader"), "samples/s")):
        return False
    readers, rates = t["reader"], [number(v) for v in t["samples/s"]]
    how = t.get("loading in", [""] * len(readers))
    short = {"main process": "main process", "main process + prefetch thread": "prefetch thread (train.py)"}
    names = [r if r.startswith(("memcpy", "on-the-fly")) else f"{r}, {short.get(h, h)}" for r, h in zip(readers, how)]
    colours = [SLOW if n.startswith(("memcpy", "on-the-fly")) else FAST for n in names]
    ax.barh(range(len(names)), rates, color=colours)   # positions, not labels: a repeated label would merge bars
    ax.set_yticks(range(len(names)), names)
    for i, r in enumerate(rates):
        ax.text(r * 1.1, i, f"{r:.0f}" if r >= 10 else f"{r:.1f}", va="center", fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (log)")
    return True


def peers_panel(ax, results: dict) -> bool:
    """Each reader's median x memcpy, its rounds' range as a whisker; this project in blue."""
    ax.set_title("The same records read by other tools\nthis project (blue) vs the others (grey), x memcpy")
    if not (t := find_table(results.get("peers"), "x memcpy, median [min-max]")):
        return False
    # "0.60 [0.48-0.89]" -> (0.60, 0.48, 0.89); the memcpy row is a plain "1.00"
    spans = [[number(v) for v in c.replace("[", " ").replace("]", " ").replace("-", " ").split()]
             for c in t["x memcpy, median [min-max]"]]
    mid, lo, hi = zip(*[(v[0], v[-2], v[-1]) if len(v) == 3 else (v[0],) * 3 for v in spans])
    names = t["reader"]
    y = range(len(names))
    ax.barh(y, mid, xerr=[[m - a for m, a in zip(mid, lo)], [b - m for m, b in zip(mid, hi)]], capsize=2,
            color=[FAST if n.startswith("this project") else SLOW for n in names])
    ax.set_yticks(list(y), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("x memcpy of the same bytes (warm page cache)")
    return True


def rebuild_panel(ax, results: dict) -> bool:
    """One line per operation (full build, no-op, ...) over the source image counts."""
    ax.set_title("Build and rebuild time vs dataset size")
    if not (t := find_table(results.get("rebuild"), "operation")):
        return False
    for op in dict.fromkeys(t["operation"]):
        points = [(number(n), number(s)) for n, o, s in zip(t["source images"], t["operation"], t["seconds"])
                  if o == op]
        ax.plot(*zip(*points), marker="o", label=op)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("source images (log)")
    ax.set_ylabel("seconds (log)")
    ax.legend(fontsize=8)
    return True


def memory_panel(ax, results: dict) -> bool:
    ax.set_title("Build peak memory vs dataset size")
    if not (t := find_table(results.get("build_memory"), "pages")):
        return False
    pages = [number(p) for p in t["pages"]]
    for column in [h for h in t if "RSS" in h]:
        ax.plot(pages, [number(v) for v in t[column]], marker="o", label=column)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("source pages")
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    return True


# (benchmarks a panel draws, the function that draws it; False when it found none of their tables)
PANELS = [(("targets", "sample"), speed_panel), (("loader",), loader_panel), (("rebuild",), rebuild_panel),
          (("build_memory",), memory_panel), (("peers",), peers_panel)]


def _placeholder(ax, names: tuple) -> None:
    """Says on an empty panel what to run."""
    ax.text(0.5, 0.5, f"no results: python benchmarks/run_all.py --only {','.join(names)}",
            ha="center", va="center", fontsize=9, transform=ax.transAxes)
    ax.set_axis_off()


def load(folder: Path) -> dict[str, dict]:
    return {r["name"]: r for r in (json.loads(f.read_text()) for f in sorted(folder.glob("*.json")))}


def draw(results: dict, out: Path, plt) -> None:
    with plt.rc_context({"axes.titlesize": 11}):
        fig, axes = plt.subplots(3, 2, figsize=(14, 12.5))
        for ax, (names, panel) in zip(axes.flat, PANELS):
            if not panel(ax, results):
                _placeholder(ax, names)
        for ax in axes.flat[len(PANELS):]:
            ax.set_axis_off()
    machines = sorted({r["machine"] for r in results.values()})
    modes = sorted({r["mode"] for r in results.values()})
    unplotted = sorted(set(results) - {n for names, _ in PANELS for n in names})
    note = f"; not drawn: {', '.join(unplotted)} (see docs/performance.md)" if unplotted else ""
    fig.suptitle(f"{'; '.join(machines)} ({'/'.join(modes)} settings){note}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=HERE / "results", help="folder of run_all.py's JSON files")
    p.add_argument("-o", "--out", type=Path, default=HERE / "results.png", help="PNG to write")
    a = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('plot.py needs matplotlib, an optional extra: pip install -e ".[bench]"', file=sys.stderr)
        return 1
    results = load(a.results)
    if not results:
        print(f"{a.results}: no results; run python benchmarks/run_all.py first", file=sys.stderr)
        return 1
    draw(results, a.out, plt)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
