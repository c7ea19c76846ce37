using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Text.Json.Serialization;

namespace RemoteCache.Manager.Catalogue;

/// <summary>A VM size the manager may rent: its memory and cores, its prices, and how many there are.</summary>
/// <param name="Name">Unique within the catalogue (e.g. "E4s-spot-pool").</param>
/// <param name="MemoryBytes">Memory a cache server on it may lend.</param>
/// <param name="Cores">Cores, so server threads at most.</param>
/// <param name="OnDemandPerHour">Price of one on-demand VM per hour.</param>
/// <param name="SpotPerHour">Price of one spot VM per hour; null when the type has no spot offer.</param>
/// <param name="Available">On-demand VMs of this type that can be rented.</param>
/// <param name="SpotAvailable">Spot VMs of this type that can be rented.</param>
public sealed record VmType(string Name, long MemoryBytes, int Cores, double OnDemandPerHour, double? SpotPerHour, int Available, int SpotAvailable)
{
    /// <summary>Price per hour in the given market.</summary>
    public double PricePerHour(bool spot) => spot ? SpotPerHour ?? throw new InvalidOperationException($"{Name} has no spot price") : OnDemandPerHour;

    /// <summary>VMs that can be rented in the given market.</summary>
    public int Count(bool spot) => spot ? (SpotPerHour is null ? 0 : SpotAvailable) : Available;
}

/// <summary>
/// When a spot VM may hold a cache (Redy §6.1): only for a cache whose duration is at most <see cref="MaxDuration"/>
/// (a cache without a duration is on-demand only), and only if what the cache holds on the VM can be migrated away
/// within the reclaim notice at <see cref="MigrationBytesPerSecond"/> (Redy: 1 GB migrates in 1.09 s, so spot VMs of at
/// most ~27 GB for a 30 s notice).
/// </summary>
/// <param name="MaxDuration">The longest cache duration that may use spot VMs.</param>
/// <param name="ReclaimNotice">The warning a reclaim gives.</param>
/// <param name="MigrationBytesPerSecond">How fast a region moves to another server.</param>
public sealed record SpotPolicy(TimeSpan MaxDuration, TimeSpan ReclaimNotice, double MigrationBytesPerSecond)
{
    /// <summary>Four hours, 30 s of notice, 0.9 GB/s (Redy's 1.09 s per GB).</summary>
    public static SpotPolicy Default { get; } = new(TimeSpan.FromHours(4), TimeSpan.FromSeconds(30), 0.9e9);

    /// <summary>Whether a cache of <paramref name="duration"/> holding <paramref name="bytesPerVm"/> on a VM may use spot VMs.</summary>
    public bool Allows(TimeSpan? duration, long bytesPerVm) =>
        duration is { } d && d <= MaxDuration && bytesPerVm <= ReclaimNotice.TotalSeconds * MigrationBytesPerSecond;
}

/// <summary>
/// The VM types the manager rents from, with prices (Redy §6.1: "a static list of VM types, with each one's memory size
/// and core count, and its price"). Stored as JSON (<see cref="FormatName"/>), loaded and checked by <see cref="Load"/>.
/// </summary>
public sealed class VmCatalogue
{
    /// <summary>The <c>format</c> field of a catalogue file.</summary>
    public const string FormatName = "remotecache-catalogue";

    /// <summary>The version this manager reads.</summary>
    public const int CurrentVersion = 1;

    /// <summary>64 MiB: small enough that a 1 GiB cache spreads over servers, large enough for few region descriptors.</summary>
    public const long DefaultRegionBytes = 64L << 20;

    private static readonly JsonSerializerOptions s_json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.CamelCase,
        ReadCommentHandling = JsonCommentHandling.Skip,
        AllowTrailingCommas = true,
        WriteIndented = true,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    };

    public string Format { get; init; } = FormatName;

    public int Version { get; init; } = CurrentVersion;

    /// <summary>Bytes per region on every server the manager runs (a cache takes whole regions).</summary>
    public long RegionBytes { get; init; } = DefaultRegionBytes;

    /// <summary>When spot VMs may be used; null: <see cref="SpotPolicy.Default"/>.</summary>
    public SpotPolicy? Spot { get; init; }

    public required IReadOnlyList<VmType> VmTypes { get; init; }

    /// <summary>The spot policy in force.</summary>
    [JsonIgnore]
    public SpotPolicy SpotPolicy => Spot ?? SpotPolicy.Default;

    /// <summary>The type named <paramref name="name"/>, or null.</summary>
    public VmType? Find(string name) => VmTypes.FirstOrDefault(t => t.Name == name);

    /// <summary>Regions a VM of <paramref name="type"/> can lend: its memory in whole regions, within the native limit.</summary>
    public int RegionsOf(VmType type) => (int)Math.Min(type.MemoryBytes / RegionBytes, RemoteCacheOptions.MaxRegionsPerServer);

    /// <summary>
    /// The catalogue used when none is given: three sizes of local server process on this one host, enough for a
    /// developer's caches (the local allocator starts them; the memory is only taken when a cache uses it).
    /// </summary>
    public static VmCatalogue LocalDefault { get; } = new()
    {
        VmTypes = new[]
        {
            new VmType("local-small", 512L << 20, 1, 0.02, 0.006, 8, 8),
            new VmType("local-medium", 2L << 30, 2, 0.07, 0.02, 4, 4),
            new VmType("local-large", 8L << 30, 2, 0.25, 0.08, 2, 2),
        },
    };

    /// <summary>Reads and checks a catalogue file.</summary>
    /// <exception cref="FormatException">Unreadable, or what is wrong with it (named).</exception>
    public static VmCatalogue Load(string path)
    {
        string text;
        try
        {
            text = File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw new FormatException($"{path}: {e.Message}", e);
        }
        try
        {
            return Parse(text);
        }
        catch (FormatException e)
        {
            throw new FormatException($"{path}: {e.Message}", e);
        }
    }

    /// <summary>Parses and checks catalogue JSON.</summary>
    /// <exception cref="FormatException">What is wrong.</exception>
    public static VmCatalogue Parse(string json)
    {
        VmCatalogue? catalogue;
        try
        {
            catalogue = JsonSerializer.Deserialize<VmCatalogue>(json, s_json);
        }
        catch (JsonException e)
        {
            throw new FormatException($"not a catalogue: {e.Message}", e);
        }
        if (catalogue is null)
            throw new FormatException("not a catalogue: null");
        catalogue.Validate();
        return catalogue;
    }

    /// <summary>The catalogue as JSON.</summary>
    public string ToJson() => JsonSerializer.Serialize(this, s_json);

    /// <summary>Checks every field.</summary>
    /// <exception cref="FormatException">What is wrong.</exception>
    public void Validate()
    {
        if (Format != FormatName)
            throw new FormatException($"format is '{Format}', not '{FormatName}'");
        if (Version != CurrentVersion)
            throw new FormatException($"version {Version} is not supported (this manager reads version {CurrentVersion})");
        if (RegionBytes < 1 << 20 || (RegionBytes & (RegionBytes - 1)) != 0)
            throw new FormatException($"regionBytes {RegionBytes} must be a power of two of at least 1 MiB");
        if (Spot is { } spot && (spot.MaxDuration < TimeSpan.Zero || spot.ReclaimNotice <= TimeSpan.Zero || !(spot.MigrationBytesPerSecond > 0)))
            throw new FormatException("spot: maxDuration must be 0 or more, reclaimNotice and migrationBytesPerSecond positive");
        if (VmTypes is null || VmTypes.Count == 0)
            throw new FormatException("vmTypes is empty");
        var names = new HashSet<string>();
        foreach (var t in VmTypes)
        {
            if (t is null || string.IsNullOrWhiteSpace(t.Name))
                throw new FormatException("a VM type has no name");
            string where = $"vmTypes '{t.Name}'";
            if (!names.Add(t.Name))
                throw new FormatException($"{where} is listed twice");
            if (t.MemoryBytes < RegionBytes)
                throw new FormatException($"{where}: memoryBytes {t.MemoryBytes} is less than one region ({RegionBytes} bytes)");
            if (t.Cores < 1 || t.Cores > CacheConfig.MaxServerThreads)
                throw new FormatException($"{where}: cores {t.Cores} must be between 1 and {CacheConfig.MaxServerThreads}");
            if (!(t.OnDemandPerHour >= 0) || double.IsInfinity(t.OnDemandPerHour) || t.SpotPerHour is { } sp && (!(sp >= 0) || double.IsInfinity(sp)))
                throw new FormatException($"{where}: prices must be finite and 0 or more");
            if (t.Available < 0 || t.SpotAvailable < 0)
                throw new FormatException($"{where}: available and spotAvailable must be 0 or more");
        }
    }
}
