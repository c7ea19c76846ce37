using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;

namespace RemoteCache.Slo;

/// <summary>
/// The performance models the RemoteCache package ships (<c>remotecache slo model</c> runs on the project's 2-core
/// development VM: shm and tcp, records of 8, 64, 512 and 4096 B), copied next to the application into
/// <see cref="DirectoryName"/>. A start for <see cref="RemoteCacheOptions.SloModelPath"/> and the manager's models; a model
/// measured on the hardware the caches run on predicts them better.
/// </summary>
public static class RemoteCacheSloModels
{
    /// <summary>The folder of the application's output (and of the package's content files) that holds them.</summary>
    public const string DirectoryName = "remotecache-models";

    /// <summary>Where the shipped models are: <see cref="DirectoryName"/> under the application's base directory.</summary>
    public static string Directory => Path.Combine(AppContext.BaseDirectory, DirectoryName);

    /// <summary>The shipped models' files, by name ("shm-512.json", …); empty when none were copied.</summary>
    public static IReadOnlyList<string> Files =>
        System.IO.Directory.Exists(Directory)
            ? System.IO.Directory.GetFiles(Directory, "*.json").Select(Path.GetFileName).OfType<string>().Order(StringComparer.Ordinal).ToList()
            : Array.Empty<string>();

    /// <summary>The path of the shipped model of <paramref name="transport"/> ("shm", "tcp") and records of <paramref name="recordSize"/> bytes.</summary>
    /// <exception cref="ArgumentException">The transport is not a plain name.</exception>
    /// <exception cref="FileNotFoundException">No such model was shipped (the message lists those that were).</exception>
    public static string PathFor(string transport, int recordSize)
    {
        ArgumentException.ThrowIfNullOrEmpty(transport);
        ArgumentOutOfRangeException.ThrowIfLessThan(recordSize, 1);
        if (!transport.All(char.IsAsciiLetterLower))
            throw new ArgumentException($"a transport is a lower-case name (shm, tcp, verbs), not '{transport[..Math.Min(transport.Length, 32)]}'", nameof(transport));
        string path = Path.Combine(Directory, $"{transport}-{recordSize}.json");
        if (!File.Exists(path))
        {
            var shipped = Files;
            throw new FileNotFoundException(
                $"no shipped SLO model for {transport} with {recordSize} B records in {Directory}; shipped: " +
                (shipped.Count == 0 ? "none (is the RemoteCache package's content copied to the output?)" : string.Join(", ", shipped)) +
                "; measure one with: remotecache slo model --transport " + transport + " --record-size " + recordSize, path);
        }
        return path;
    }
}
