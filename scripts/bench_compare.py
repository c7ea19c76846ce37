#!/usr/bin/env python3
"""Before/after comparison of the native data-path figures of docs/performance.md: the same remotecache-bench
configurations run on two builds, interleaved round by round (the order alternates) so that the
machine's drift hits both alike. Prints each build's median and the ratio after/before.

usage: bench_compare.py BEFORE_BUILD_DIR AFTER_BUILD_DIR [--rounds N] [--seconds T] [--only TEXT] [--busy N]
--busy N runs N processes that only burn CPU beside every measurement (other tenants on the same cores); they are
processes of their own, not remotecache-bench's --busy-threads, so that a build from before that flag compares too.
(scripts/bench_compare.sh builds a git ref and the working tree and calls this.)
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_native import bench  # noqa: E402

# (name, metric, better, remotecache-bench flags): the four rows of the native table of docs/performance.md.
CONFIGS = [
    ("shm 8 B read p50, b=1 q=1 (c0 s0)", "p50_us", "lower",
     dict(transport="shm", op="read", size=8, batch=1, qdepth=1, client_threads=0, server_threads=0)),
    ("shm 8 B write, batched (c0 s1 b170 q2)", "ops_per_sec", "higher",
     dict(transport="shm", op="write", size=8, batch=170, qdepth=2, client_threads=0, server_threads=1)),
    ("tcp 8 B read, batched (c0 s1 b256 q8)", "ops_per_sec", "higher",
     dict(transport="tcp", op="read", size=8, batch=256, qdepth=8, client_threads=0, server_threads=1)),
    ("tcp 8 B read p50, b=1 q=1 (c0 s1)", "p50_us", "lower",
     dict(transport="tcp", op="read", size=8, batch=1, qdepth=1, client_threads=0, server_threads=1)),
    # A client thread besides the application's and the server's: three busy threads, more than this machine's
    # two cores, so these two show how the polling loops behave when they must share cores.
    ("shm 8 B read, b=1 q=1 (c1 s1)", "ops_per_sec", "higher",
     dict(transport="shm", op="read", size=8, batch=1, qdepth=1, client_threads=1, server_threads=1)),
    ("tcp 8 B read, b=1 q=1 (c1 s1)", "ops_per_sec", "higher",
     dict(transport="tcp", op="read", size=8, batch=1, qdepth=1, client_threads=1, server_threads=1)),
]


@contextlib.contextmanager
def busy_processes(count):
    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--only", default="", help="run only the configurations whose name contains this text")
    ap.add_argument("--busy", type=int, default=0, help="processes burning CPU beside every measurement")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if args.only in c[0]]
    builds = {"before": args.before, "after": args.after}
    results = {name: {"before": [], "after": []} for name, *_ in configs}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for name, metric, _, flags in configs:
            for which in order:
                with busy_processes(args.busy):
                    row = bench(builds[which], args.seconds, **flags)
                results[name][which].append(row[metric])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'configuration':42} {'before':>12} {'after':>12} {'after/before':>13}  per-round ratios")
    summary = {}
    for name, metric, better, _ in configs:
        b, a = results[name]["before"], results[name]["after"]
        mb, ma = statistics.median(b), statistics.median(a)
        ratios = [x / y for x, y in zip(a, b)]
        scale, unit = (1e-6, "M/s") if metric == "ops_per_sec" else (1, "us")
        print(f"{name:42} {mb * scale:8.3f} {unit:3} {ma * scale:8.3f} {unit:3} {ma / mb:12.3f}x  "
              + " ".join(f"{x:.2f}" for x in ratios) + f"  ({better} is better)")
        summary[name] = {"metric": metric, "busy": args.busy, "before": b, "after": a, "median_ratio": ma / mb}
    os.makedirs("artifacts", exist_ok=True)
    with open("artifacts/bench-compare.json", "w") as f:
        json.dump(summary, f, indent=2)
    print("\nraw rounds: artifacts/bench-compare.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
