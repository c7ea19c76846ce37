using System;
using System.Globalization;
using System.IO;
using System.Linq;

namespace RemoteCache;

/// <summary>
/// What the host has to spare, read now: the headroom of the memory cgroup this process runs in (cgroup v1: its limit
/// less its usage) where that cgroup has a limit, else the kernel's estimate of available memory (MemAvailable); and how
/// much of it this process holds as shared memory (its regions' pages: RssShmem), which the host gets back when caches leave.
/// </summary>
/// <param name="Total">The cgroup's limit, or the host's memory (MemTotal).</param>
/// <param name="Headroom">What the host's processes could still take before the limit, or MemAvailable.</param>
/// <param name="Held">This process's resident shared memory (the pages of the regions it lends).</param>
/// <param name="Source">Where it was read ("cgroup /path" or "/proc/meminfo").</param>
internal sealed record HostMemoryReading(long Total, long Headroom, long Held, string Source);

/// <summary>Reads <see cref="HostMemoryReading"/>s; tests give their own.</summary>
internal interface IHostMemory
{
    HostMemoryReading Read();
}

/// <summary>The host's memory as Linux reports it (/proc/self/cgroup, /sys/fs/cgroup/memory, /proc/meminfo, /proc/self/status).</summary>
internal sealed class LinuxHostMemory : IHostMemory
{
    // A cgroup v1 limit at or past this is "no limit" (the kernel reports PAGE_COUNTER_MAX pages).
    private const long NoLimit = 1L << 62;

    private readonly string? _cgroup;

    public LinuxHostMemory(string procRoot = "/proc", string cgroupRoot = "/sys/fs/cgroup/memory")
    {
        ProcRoot = procRoot;
        string? line = File.Exists(Path.Combine(procRoot, "self/cgroup"))
            ? File.ReadLines(Path.Combine(procRoot, "self/cgroup")).FirstOrDefault(l => l.Split(':') is [_, var controllers, _] && controllers.Split(',').Contains("memory"))
            : null;
        if (line is not null && Directory.Exists(cgroupRoot))
        {
            string path = Path.Combine(cgroupRoot, line.Split(':', 3)[2].TrimStart('/'));
            if (File.Exists(Path.Combine(path, "memory.limit_in_bytes")) && ReadNumber(Path.Combine(path, "memory.limit_in_bytes")) < NoLimit)
                _cgroup = path;
        }
    }

    private string ProcRoot { get; }

    public HostMemoryReading Read()
    {
        long held = Kib(Path.Combine(ProcRoot, "self/status"), "RssShmem:");
        if (_cgroup is { } cgroup)
        {
            long limit = ReadNumber(Path.Combine(cgroup, "memory.limit_in_bytes"));
            long usage = ReadNumber(Path.Combine(cgroup, "memory.usage_in_bytes"));
            return new HostMemoryReading(limit, Math.Max(0, limit - usage), held, "cgroup " + cgroup);
        }
        string meminfo = Path.Combine(ProcRoot, "meminfo");
        return new HostMemoryReading(Kib(meminfo, "MemTotal:"), Kib(meminfo, "MemAvailable:"), held, meminfo);
    }

    private static long ReadNumber(string path) =>
        long.TryParse(File.ReadAllText(path).Trim(), NumberStyles.None, CultureInfo.InvariantCulture, out long value) ? value : NoLimit;

    // A "Name:   123 kB" line's value in bytes (0 when absent).
    private static long Kib(string path, string name)
    {
        foreach (string line in File.ReadLines(path))
            if (line.StartsWith(name, StringComparison.Ordinal) &&
                long.TryParse(line.AsSpan(name.Length).Trim().TrimEnd("kB").Trim(), NumberStyles.None, CultureInfo.InvariantCulture, out long kib))
                return kib * 1024;
        return 0;
    }
}
