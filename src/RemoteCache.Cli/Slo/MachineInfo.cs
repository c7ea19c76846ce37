using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>Describes this machine for a model (Linux: /proc/cpuinfo, /proc/meminfo, /etc/os-release, the kernel release).</summary>
internal static class MachineInfo
{
    /// <summary>This machine; <paramref name="note"/> goes first in the note, then what /proc says about it.</summary>
    public static MachineDescription Describe(string? note)
    {
        var cpuinfo = ReadLines("/proc/cpuinfo");
        string cpu = Field(cpuinfo, "model name") ?? Field(cpuinfo, "Hardware") ?? Field(cpuinfo, "cpu model")
                     ?? RuntimeInformation.ProcessArchitecture.ToString();
        long memory = 0;
        if (Field(ReadLines("/proc/meminfo"), "MemTotal") is { } total &&
            long.TryParse(total.Split(' ', StringSplitOptions.RemoveEmptyEntries)[0], NumberStyles.Integer, CultureInfo.InvariantCulture, out long kib))
            memory = kib * 1024;
        string? distribution = ReadLines("/etc/os-release").Where(l => l.StartsWith("PRETTY_NAME=", StringComparison.Ordinal))
                                                         .Select(l => l["PRETTY_NAME=".Length..].Trim('"')).FirstOrDefault();
        string? kernel = ReadLines("/proc/sys/kernel/osrelease").FirstOrDefault()?.Trim();
        string os = kernel is null ? RuntimeInformation.OSDescription
                    : distribution is null ? $"Linux {kernel}" : $"{distribution}, Linux {kernel}";

        var notes = new List<string>();
        if (!string.IsNullOrWhiteSpace(note))
            notes.Add(note.Trim());
        if (cpuinfo.Any(l => l.StartsWith("flags", StringComparison.Ordinal) && l.Split(' ').Contains("hypervisor")))
            notes.Add("a virtual machine (cpuinfo has the hypervisor flag)");
        if (LoadAverage() is { } load)
            notes.Add($"load average {load} (1, 5, 15 min) when the measurement started");
        return new MachineDescription(cpu, Environment.ProcessorCount, memory, os)
        {
            Note = notes.Count == 0 ? null : string.Join("; ", notes),
        };
    }

    /// <summary>The 1, 5 and 15 minute load averages of /proc/loadavg, or null.</summary>
    public static string? LoadAverage() =>
        ReadLines("/proc/loadavg").FirstOrDefault() is { } line ? string.Join(" ", line.Split(' ').Take(3)) : null;

    /// <summary><paramref name="machine"/> with the load average now added to its note.</summary>
    public static MachineDescription WithLoadAtEnd(MachineDescription machine) =>
        LoadAverage() is { } load
            ? machine with { Note = (machine.Note is null ? "" : machine.Note + "; ") + $"load average {load} when it ended" }
            : machine;

    private static string[] ReadLines(string path)
    {
        try
        {
            return File.ReadAllLines(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return Array.Empty<string>();
        }
    }

    private static string? Field(IEnumerable<string> lines, string name)
    {
        foreach (string line in lines)
        {
            int colon = line.IndexOf(':', StringComparison.Ordinal);
            if (colon > 0 && line[..colon].Trim() == name)
                return line[(colon + 1)..].Trim();
        }
        return null;
    }
}
