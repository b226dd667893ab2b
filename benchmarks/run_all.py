"""Runs every benchmark script in benchmarks/ and writes results/*.json from their tables, then docs/performance.md
and the README's headline figures from all of results/ (report.py).

The project's performance figures come from one command:

    python benchmarks/run_all.py            # each script's defaults; long
    python benchmarks/run_all.py --quick    # small settings, a few minutes: checks that all still run
    python benchmarks/run_all.py --only sample,loader
    python benchmarks/run_all.py --only compare   # compare.py against COMPARE_REVS (long: never run by default)
    python benchmarks/run_all.py --only peers --peers-python /path/to/peers-env/bin/python
    python benchmarks/run_all.py --record gpu gpu.txt --command "python benchmarks/bench_gpu.py ..." \
        --machine "NVIDIA H200, 16 cores"   # a benchmark's output from a run on another machine

bench_peers.py needs the optional `.[peers]` extra, best in an environment of its own (benchmarks/peers.py says
why); --peers-python (or EAST_PEERS_PYTHON) names that environment's interpreter. Without the extra it prints a
note, which stands in its section, and the rest runs as usual.

Each script runs in its own process and prints markdown tables; that output is the one contract. For
script NAME (bench_NAME.py) this writes results/NAME.json (command, mode, machine, date, the output
and its tables as data, for plot.py), then renders docs/performance.md from every results/*.json there, so
that --only refreshes one section and keeps the others. A new script joins by being named
bench_*.py; without a QUICK entry it runs with its defaults in both modes. compare.py (the working tree against
earlier revisions, builds and reads alternated) joins as `compare`, with COMPARE_REVS (--compare-revs), only when
named: it takes several times the others' time (its section of docs/performance.md says how long).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, machine, table
from report import ORDER, write_reports

HERE = Path(__file__).resolve().parent
# Arguments that bring each benchmark down to seconds or a minute on 2 cores.
QUICK = {
    "targets": ["--pages", "1", "--repeat", "1"],
    "sample": ["--pages", "3", "--photos", "2", "--repeat", "1"],
    "crops": ["--images", "4", "--photos", "4", "--dense", "4", "--cameras", "2", "--batches", "4", "--late", "3,4"],
    "geometry": ["--images", "2", "--photos", "2", "--cameras", "2", "--repeat", "1", "--build-repeat", "1",
                 "--cpu-seconds", "0.3", "--psnr-epochs", "1"],
    "augment": ["--photos", "2", "--crops", "8", "--repeat", "2", "--cpu-seconds", "0.5"],
    "codec": ["--photos", "2", "--streets", "3", "--pages", "2", "--repeat", "1", "--epochs", "2"],
    "loader": ["--images", "8", "--epochs", "1"],
    "peers": ["--records", "8", "--rounds", "2", "--input-size", "256"],
    "rebuild": ["--sizes", "100,1000"],
    "build_memory": ["--sizes", "10,40", "--input-size", "256"],
    "zarr": ["--images", "8", "--epochs", "1", "--repeat", "1"],
    "review": ["--images", "40", "--photos", "2", "--loads", "1"],
    "gpu": ["--quick"],                 # on a machine without CUDA: a note, nothing measured
    "gpu_augment": ["--quick"],         # the same
    "time_to_accuracy": ["--quick"],    # the same
    "fusion": ["--quick"],              # the same
    "remote": ["--mib", "16", "--files", "4", "--file-mib", "2", "--compute-ms", "20", "--images", "12",
               "--epochs", "3", "--timed-epochs", "5"],
    "check": ["--images", "40", "--copies", "12", "--photos", "2", "--build-photos", "4"],
    "selection": ["--photos", "6", "--folds", "3", "--epochs", "1", "--rounds", "1"],
    "ensemble": ["--images", "40", "--steps", "20", "--pages", "8", "--speed-images", "200"],
    "compare": ["--rounds", "1", "--pages", "4", "--photos", "4", "--small", "2", "--streets", "3", "--cpu-seconds",
                "0.3", "--baseline-photos", "1"],
}
# compare.py's revisions: issue 48's, the head before the half level and the five-frame weights (the build's
# reference) and the one that added them (the reads' reference)
COMPARE_REVS = ["9a8d605", "a8d07e9"]
NOT_BY_DEFAULT = {"compare"}   # run only when --only names them


def _rank(name: str) -> tuple:
    return ORDER.index(name) if name in ORDER else len(ORDER), name


def scripts() -> dict[str, Path]:
    """{NAME: path} of every benchmarks/bench_NAME.py and of compare.py, in ORDER."""
    found = {p.stem.removeprefix("bench_"): p for p in [*HERE.glob("bench_*.py"), HERE / "compare.py"]}
    return {name: found[name] for name in sorted(found, key=_rank)}


def parse_tables(text: str) -> list[dict]:
    """The markdown tables in `text`, as {"header": [cells], "rows": [[cells]]}, cells as printed."""
    tables, lines = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            lines.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif lines:
            tables.append({"header": lines[0], "rows": lines[2:]})   # lines[1] is the |---| rule
            lines = []
    return tables


def run_one(name: str, script: Path, quick: bool, python: str = sys.executable, revs: list[str] = ()) -> dict:
    """Runs one script with `python`; its stderr passes through, so build progress and errors show as they happen.
    revs: compare.py's revisions."""
    args = [*revs, *(QUICK.get(name, []) if quick else [])]
    command = ["python", str(script.relative_to(REPO)), *args]   # as a reader would type it, in its environment
    print(f"$ {shlex.join(command)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([python, str(script), *args], cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    return {"name": name, "command": shlex.join(command), "mode": "quick" if quick else "full",
            "machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.perf_counter() - t0, 1), "returncode": done.returncode, "output": done.stdout,
            "tables": parse_tables(done.stdout)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small settings (minutes in all) instead of the README's")
    p.add_argument("--only", help="comma-separated benchmark names (e.g. sample,loader); default: all")
    p.add_argument("--out", type=Path, default=HERE, help="folder for results/ (default: benchmarks/; only there are "
                                                          "docs/performance.md and the README rewritten)")
    p.add_argument("--record", nargs=2, metavar=("NAME", "FILE"),
                   help="record FILE, the output of bench_NAME.py run on another machine, instead of running anything")
    p.add_argument("--command", help="with --record: the command that printed FILE")
    p.add_argument("--machine", help="with --record: the machine it ran on")
    p.add_argument("--compare-revs", default=",".join(COMPARE_REVS),
                   help=f"comma-separated revisions compare.py measures the working tree against (default "
                        f"{','.join(COMPARE_REVS)})")
    p.add_argument("--peers-python", default=os.environ.get("EAST_PEERS_PYTHON") or sys.executable,
                   help="interpreter of an environment with the .[peers] extra, for bench_peers.py "
                        "(default: $EAST_PEERS_PYTHON, else this one)")
    a = p.parse_args()
    if a.record:
        name, path = a.record
        if not (a.command and a.machine):
            p.error("--record needs --command and --machine: what printed the file, and where")
        text = Path(path).read_text()
        result = {"name": name, "command": a.command, "mode": "recorded", "machine": a.machine,
                  "date": datetime.datetime.fromtimestamp(Path(path).stat().st_mtime, datetime.timezone.utc)
                  .strftime("%Y-%m-%d %H:%M UTC"), "seconds": 0.0, "returncode": 0, "output": text,
                  "tables": parse_tables(text)}
        (a.out / "results").mkdir(parents=True, exist_ok=True)
        (a.out / "results" / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        return report(a.out, [])
    found = scripts()
    names = a.only.split(",") if a.only else [n for n in found if n not in NOT_BY_DEFAULT]
    unknown = [n for n in names if n not in found]
    if unknown:
        p.error(f"no benchmark named {', '.join(unknown)}; there are: {', '.join(found)}")
    (a.out / "results").mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        result = run_one(name, found[name], a.quick, a.peers_python if name == "peers" else sys.executable,
                         a.compare_revs.split(",") if name == "compare" else [])
        (a.out / "results" / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        if result["returncode"]:
            failed.append(name)
    return report(a.out, failed)


def report(out: Path, failed: list[str]) -> int:
    """docs/performance.md and the README's headline from every result in out/results (only for benchmarks/)."""
    kept = {r["name"]: r for r in (json.loads(f.read_text()) for f in (out / "results").glob("*.json"))}
    if out == HERE:
        write_reports(REPO, kept, table)
        print("wrote docs/performance.md and the README's headline", file=sys.stderr)
    print(f"results in {out / 'results'}" + (f"; FAILED: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
