#!/usr/bin/env python3
"""Native data-path figures against references measured in the same run.

Runs remotecache-reference (shared-memory and loopback-TCP round trips), redis-benchmark against a
loopback redis-server, and remotecache-bench over shm and tcp, then prints each issue target as a
ratio to its reference. Writes the raw rows to artifacts/bench-native.json.

usage: bench_native.py BUILD_DIR [--seconds T] [--quick]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def bench(build, seconds, **flags):
    cmd = [os.path.join(build, "remotecache-bench"), "--json", "--seconds", str(seconds)]
    for key, value in flags.items():
        cmd += ["--" + key.replace("_", "-"), str(value)]
    row = run_json(cmd)[-1]
    print(f"  {row['transport']:4} {row['op']:5} b={row['batch']:<3} q={row['qdepth']:<2} c={row['client_threads']} "
          f"s={row['server_threads']}  {row['ops_per_sec']/1e6:7.3f} M ops/s  p50 {row['p50_us']:8.2f} us",
          flush=True)
    return row


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_get_rate():
    """Redis GET, 8 B values, 4 clients, pipeline 16, on loopback (ops/s), or None without redis."""
    if not shutil.which("redis-server") or not shutil.which("redis-benchmark"):
        print("  redis-server not installed: skipping the Redis reference")
        return None
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "get", "-d", "8", "-c", "4", "-P", "16",
                              "-n", "2000000", "--csv"], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            fields = [f.strip('"') for f in line.split(",")]
            if fields[0] == "GET":
                return float(fields[1])
    finally:
        server.terminate()
        server.wait()
    return None


def best(rows, key):
    return max(rows, key=lambda r: r[key])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer configurations")
    args = ap.parse_args()
    b, t = args.build, args.seconds

    print("references:")
    ref = run_json([os.path.join(b, "remotecache-reference")])[-1]
    print(f"  shared-memory cross-core round trip {ref['shm_rtt_us']:.3f} us, loopback TCP 16 B ping-pong "
          f"{ref['tcp_rtt_us']:.2f} us, random 8 B stores into 256 MiB {ref['store_mops']:.1f} M/s")
    redis = redis_get_rate()
    if redis:
        print(f"  redis-benchmark GET -d 8 -c 4 -P 16: {redis/1e6:.3f} M ops/s")

    print("remotecache-bench:")
    rows = {}
    rows["shm_read_lat"] = bench(b, t, transport="shm", op="read", size=8, batch=1, qdepth=1,
                                 client_threads=0, server_threads=0)
    write_cfgs = [(170, 2), (128, 4)] if args.quick else [(64, 2), (128, 2), (170, 2), (128, 4), (170, 4)]
    rows["shm_write_tput"] = best([bench(b, t, transport="shm", op="write", size=8, batch=bb, qdepth=q,
                                         client_threads=0, server_threads=1) for bb, q in write_cfgs],
                                  "ops_per_sec")
    read_cfgs = [(256, 4), (256, 8)] if args.quick else [(128, 4), (256, 4), (256, 8), (256, 16)]
    rows["tcp_read_tput"] = best([bench(b, t, transport="tcp", op="read", size=8, batch=bb, qdepth=q,
                                        client_threads=0, server_threads=1) for bb, q in read_cfgs],
                                 "ops_per_sec")
    rows["tcp_read_lat"] = bench(b, t, transport="tcp", op="read", size=8, batch=1, qdepth=1,
                                 client_threads=0, server_threads=1)

    def cfg(r):
        return f"c={r['client_threads']} s={r['server_threads']} b={r['batch']} q={r['qdepth']}"

    # (label, row key, measured value, unit, comparison, goal, ratio to the reference, its name)
    shm_lat, shm_tput = rows["shm_read_lat"], rows["shm_write_tput"]
    tcp_tput, tcp_lat = rows["tcp_read_tput"], rows["tcp_read_lat"]
    checks = [
        ("shm 8 B read p50, b=1 q=1", shm_lat, shm_lat["p50_us"], "us", "<=", 1.0,
         shm_lat["p50_us"] / ref["shm_rtt_us"], "x shm rtt"),
        ("shm 8 B write, batched", shm_tput, shm_tput["ops_per_sec"] / 1e6, "M/s", ">=", 10.0,
         shm_tput["ops_per_sec"] / 1e6 / ref["store_mops"], "x raw stores"),
        ("tcp 8 B read, batched", tcp_tput, tcp_tput["ops_per_sec"] / 1e6, "M/s", ">=",
         3 * redis / 1e6 if redis else None, tcp_tput["ops_per_sec"] / redis if redis else None, "x redis"),
        ("tcp 8 B read p50, b=1 q=1", tcp_lat, tcp_lat["p50_us"], "us", "<=", 1.5 * ref["tcp_rtt_us"],
         tcp_lat["p50_us"] / ref["tcp_rtt_us"], "x tcp rtt"),
    ]
    print()
    print(f"{'target':28} {'measured':>13} {'goal':>9} {'ratio':>18}  result  config")
    for label, row, value, unit, op, goal, ratio, ratio_name in checks:
        ok = None if goal is None else (value <= goal if op == "<=" else value >= goal)
        goal_text = "" if goal is None else f"{op}{goal:.2f}"
        ratio_text = "" if ratio is None else f"{ratio:.2f} {ratio_name}"
        verdict = "n/a " if ok is None else ("PASS" if ok else "MISS")
        print(f"{label:28} {value:9.3f} {unit:3} {goal_text:>9} {ratio_text:>18}  {verdict}    {cfg(row)}")
    os.makedirs("artifacts", exist_ok=True)
    with open("artifacts/bench-native.json", "w") as f:
        json.dump({"reference": ref, "redis_get_ops_per_sec": redis, "rows": rows}, f, indent=2)
    print("\nraw rows: artifacts/bench-native.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
