"""A memory producer's own service (Memtrade's producer): a request loop whose latency is what harvesting must not hurt.

usage: producer.py STEPS SECONDS [PAUSE]
  STEPS    working-set sizes in MiB, comma-separated, reached one after another (every page written)
  SECONDS  how long requests are served after each step is reached
  PAUSE    seconds idle after each step's line before the next step (default 0), for an observer to look

Prints "ready"; after each step's SECONDS of requests "step MIB requests=N p50_us=X p99_us=Y max_us=Z"; at the end
"done requests=N p50_us=X p99_us=Y max_us=Z" over every request served, then holds its memory for an hour.
A request reads and rewrites 16 random bytes across the working set: when the host's memory runs short (reclaim,
a squeezed cgroup), those touches fault, and the request's latency shows it.
"""
import random
import sys
import time
from array import array

CHUNK = 16 << 20
TOUCHES = 16


def quantiles(samples):
    ordered = sorted(samples)
    n = len(ordered)
    pick = lambda q: ordered[min(n - 1, int(q * n))] / 1000.0
    return "requests=%d p50_us=%.2f p99_us=%.2f max_us=%.2f" % (n, pick(0.5), pick(0.99), ordered[-1] / 1000.0)


def serve(hold, seconds):
    """Serves requests for SECONDS; returns their latencies in ns."""
    latencies = array("q")
    rand, clock = random.randrange, time.perf_counter_ns
    chunks, end = len(hold), clock() + int(seconds * 1e9)
    while True:
        start = clock()
        if start >= end:
            return latencies
        for _ in range(TOUCHES):
            block = hold[rand(chunks)]
            i = rand(CHUNK)
            block[i] = (block[i] + 1) & 0xFF
        latencies.append(clock() - start)


def main():
    steps = [int(s) for s in sys.argv[1].split(",")]
    seconds = float(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    hold, every = [], array("q")
    print("ready", flush=True)
    for mib in steps:
        while len(hold) * (CHUNK >> 20) < mib:
            hold.append(bytearray(b"\x01" * CHUNK))
        served = serve(hold, seconds)
        every.extend(served)
        print("step %d %s" % (mib, quantiles(served)), flush=True)
        time.sleep(pause)
    print("done %s" % quantiles(every), flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
