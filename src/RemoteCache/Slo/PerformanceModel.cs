using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Text.Json.Serialization;

namespace RemoteCache.Slo;

/// <summary>What a model predicts or an SLO bounds: reads or writes.</summary>
public enum SloOperation
{
    /// <summary>Reads of one record.</summary>
    Read,

    /// <summary>Writes of one record.</summary>
    Write,
}

/// <summary>
/// One measured configuration: with <see cref="CacheConfig.BatchSize"/> · <see cref="CacheConfig.QueueDepth"/>
/// operations kept in flight by one application thread, the mean latency and the throughput it reached (Redy §5).
/// </summary>
/// <param name="C">Client threads (0 = the application thread does the client work).</param>
/// <param name="S">Server threads (0 = one-sided access).</param>
/// <param name="B">Batch size.</param>
/// <param name="Q">Queue depth.</param>
/// <param name="MeanUs">Mean latency of an operation, µs (Redy's SLOs bound the average latency).</param>
/// <param name="OpsPerSecond">Operations completed per second.</param>
public sealed record ModelPoint(int C, int S, int B, int Q, double MeanUs, double OpsPerSecond)
{
    /// <summary>Median latency, µs, when measured (informative: searches use <see cref="MeanUs"/>).</summary>
    public double? P50Us { get; init; }

    /// <summary>99th-percentile latency, µs, when measured (informative).</summary>
    public double? P99Us { get; init; }

    /// <summary>The configuration measured.</summary>
    [JsonIgnore]
    public CacheConfig Config => new(C, S, B, Q);
}

/// <summary>
/// The configurations a model covers: c in 0..MaxClientThreads, s in MinServerThreads..MaxServerThreads, b in
/// 1..MaxBatch (b = 1 when s = 0: one-sided requests are not batched), q in 1..MaxQueueDepth. Measured points lie on
/// the grid of 0, the powers of two and each parameter's maximum; the configurations between them are interpolated.
/// </summary>
public sealed record ConfigurationSpace(int MaxClientThreads, int MinServerThreads, int MaxServerThreads, int MaxBatch, int MaxQueueDepth)
{
    /// <summary>The largest batch worth modelling for records of <paramref name="recordSize"/> bytes: ⌈4 KiB / size⌉.</summary>
    public static int BatchLimit(int recordSize) => (4096 + recordSize - 1) / recordSize;

    /// <summary>
    /// The grid of a parameter ranging over <paramref name="min"/>..<paramref name="max"/>, ascending: 0 (when min is 0),
    /// the powers of two from min, and max itself (measured too, so that the values past the last power of two are
    /// predicted).
    /// </summary>
    public static int[] GridValues(int min, int max)
    {
        var grid = new List<int>();
        if (min == 0)
            grid.Add(0);
        for (long g = 1; g <= max; g *= 2)
        {
            if (g >= min)
                grid.Add((int)g);
        }
        if (max >= 1 && grid[^1] != max)
            grid.Add(max);
        return grid.ToArray();
    }

    /// <summary>Whether <paramref name="config"/> is in the space.</summary>
    public bool Contains(CacheConfig config) =>
        config.ClientThreads >= 0 && config.ClientThreads <= MaxClientThreads &&
        config.ServerThreads >= MinServerThreads && config.ServerThreads <= MaxServerThreads &&
        config.BatchSize >= 1 && config.BatchSize <= MaxBatch && (config.ServerThreads > 0 || config.BatchSize == 1) &&
        config.QueueDepth >= 1 && config.QueueDepth <= MaxQueueDepth;

    /// <summary>What is wrong with the space, or null.</summary>
    internal string? Problem(int recordSize) =>
        MaxClientThreads is < 0 or > CacheConfig.MaxClientThreads ? $"maxClientThreads {MaxClientThreads} must be 0..{CacheConfig.MaxClientThreads}"
        : MinServerThreads is not (0 or 1) ? $"minServerThreads {MinServerThreads} must be 0 (one-sided access) or 1"
        : MaxServerThreads < Math.Max(1, MinServerThreads) || MaxServerThreads > CacheConfig.MaxServerThreads
            ? $"maxServerThreads {MaxServerThreads} must be at least 1 and minServerThreads, and at most {CacheConfig.MaxServerThreads}"
        : MaxBatch < 1 || MaxBatch > BatchLimit(recordSize)
            ? $"maxBatch {MaxBatch} must be 1..{BatchLimit(recordSize)} for {recordSize} B records (⌈4096 / record size⌉: a batch stops at 4 KiB)"
        : MaxQueueDepth is < 1 or > CacheConfig.MaxQueueDepth
            ? $"maxQueueDepth {MaxQueueDepth} must be 1..{CacheConfig.MaxQueueDepth} (the transports' limit, RC_MAX_QUEUE_DEPTH)"
        : null;
}

/// <summary>The machine a model was measured on.</summary>
/// <param name="Cpu">CPU model name.</param>
/// <param name="Cores">Logical cores.</param>
/// <param name="MemoryBytes">Physical memory.</param>
/// <param name="Os">Operating system and kernel.</param>
public sealed record MachineDescription(string Cpu, int Cores, long MemoryBytes, string Os)
{
    /// <summary>Anything else that bears on the figures (a VM, emulation, other load).</summary>
    public string? Note { get; init; }
}

/// <summary>How and when a model's points were measured.</summary>
/// <param name="Date">UTC date (yyyy-MM-dd) of the measurement.</param>
/// <param name="Command">The command line that measured it, to measure it again.</param>
/// <param name="Tool">What drove the data path (e.g. remotecache-bench).</param>
/// <param name="SecondsPerPoint">Measured seconds per configuration.</param>
/// <param name="WarmupSeconds">Unmeasured seconds before each.</param>
public sealed record MeasurementInfo(string Date, string Command, string Tool, double SecondsPerPoint, double WarmupSeconds)
{
    /// <summary>
    /// Runs per configuration; a point holds the median latency and the median throughput of its runs (1 in files
    /// written before repeats existed).
    /// </summary>
    public int Repeats { get; init; } = 1;
}

/// <summary>
/// A performance model (Redy §5): for one transport, network distance and record size, the latency and throughput
/// measured at configurations on the power-of-two grid, per operation. Stored as versioned JSON
/// (<see cref="FormatName"/>, <see cref="CurrentVersion"/>); <see cref="Load"/> and <see cref="Parse"/> check it and
/// name what is wrong.
/// </summary>
public sealed class PerformanceModel
{
    /// <summary>The <c>format</c> field of every model file.</summary>
    public const string FormatName = "remotecache-slo-model";

    /// <summary>The format version this library writes and reads.</summary>
    public const int CurrentVersion = 1;

    private static readonly JsonSerializerOptions s_json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.CamelCase,
        DictionaryKeyPolicy = JsonNamingPolicy.CamelCase,
        Converters = { new JsonStringEnumConverter(JsonNamingPolicy.CamelCase, allowIntegerValues: false) },
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
        WriteIndented = true,
        ReadCommentHandling = JsonCommentHandling.Skip,
        AllowTrailingCommas = true,
    };

    /// <summary>Always <see cref="FormatName"/>.</summary>
    public string Format { get; init; } = FormatName;

    /// <summary>The format version.</summary>
    public int Version { get; init; } = CurrentVersion;

    /// <summary>shm, tcp or verbs.</summary>
    public required string Transport { get; init; }

    /// <summary>Where the servers were from the client: "same-host", "same-rack", ...</summary>
    public required string Distance { get; init; }

    /// <summary>Bytes per operation.</summary>
    public required int RecordSize { get; init; }

    /// <summary>The machine measured on.</summary>
    public required MachineDescription Machine { get; init; }

    /// <summary>When and how.</summary>
    public required MeasurementInfo Measured { get; init; }

    /// <summary>The configurations the model covers.</summary>
    public required ConfigurationSpace Space { get; init; }

    /// <summary>Measured points per operation, in the order they were measured.</summary>
    public required Dictionary<SloOperation, List<ModelPoint>> Operations { get; init; }

    /// <summary>A copy of this model (transport, machine, space, ...) with other measured points.</summary>
    public PerformanceModel WithOperations(Dictionary<SloOperation, List<ModelPoint>> operations) => new()
    {
        Transport = Transport,
        Distance = Distance,
        RecordSize = RecordSize,
        Machine = Machine,
        Measured = Measured,
        Space = Space,
        Operations = operations,
    };

    /// <summary>The points of <paramref name="operation"/> (empty when it was not measured).</summary>
    public IReadOnlyList<ModelPoint> Points(SloOperation operation) =>
        Operations.TryGetValue(operation, out var points) ? points : Array.Empty<ModelPoint>();

    /// <summary>Reads and checks a model file.</summary>
    /// <exception cref="FormatException">The file is not a valid model; the message names the field and the file.</exception>
    public static PerformanceModel Load(string path)
    {
        string json;
        try
        {
            json = File.ReadAllText(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            throw new FormatException($"{path}: cannot read the model: {e.Message}", e);
        }
        try
        {
            return Parse(json);
        }
        catch (FormatException e)
        {
            throw new FormatException($"{path}: {e.Message}", e);
        }
    }

    /// <summary>Parses and checks a model.</summary>
    /// <exception cref="FormatException">Not a valid model; the message names the field.</exception>
    public static PerformanceModel Parse(string json)
    {
        PerformanceModel? model;
        try
        {
            model = JsonSerializer.Deserialize<PerformanceModel>(json, s_json);
        }
        catch (JsonException e)
        {
            throw new FormatException($"not a RemoteCache SLO model: {e.Message}", e);
        }
        if (model is null)
            throw new FormatException("not a RemoteCache SLO model: the document is null");
        model.Validate();
        return model;
    }

    /// <summary>The model as JSON.</summary>
    public string ToJson() => JsonSerializer.Serialize(this, s_json);

    /// <summary>Checks and writes the model (to a temporary file first, so that a crash never leaves half a model).</summary>
    public void Save(string path)
    {
        Validate();
        string temp = path + ".tmp";
        File.WriteAllText(temp, ToJson());
        File.Move(temp, path, overwrite: true);
    }

    /// <summary>Checks the model's fields and points.</summary>
    /// <exception cref="FormatException">What is wrong.</exception>
    public void Validate()
    {
        if (Format != FormatName)
            throw new FormatException($"format is '{Format}', not '{FormatName}'");
        if (Version != CurrentVersion)
            throw new FormatException($"version {Version} is not supported (this library reads version {CurrentVersion})");
        if (string.IsNullOrWhiteSpace(Transport))
            throw new FormatException("transport is missing");
        if (RecordSize < 1)
            throw new FormatException($"recordSize {RecordSize} must be at least 1");
        if (Measured is null)
            throw new FormatException("measured is missing");
        if (Measured.Repeats < 1)
            throw new FormatException($"measured.repeats {Measured.Repeats} must be at least 1");
        if (Space is null)
            throw new FormatException("space is missing");
        if (Space.Problem(RecordSize) is { } problem)
            throw new FormatException($"space: {problem}");
        if (Operations is null || Operations.Count == 0 || Operations.Values.All(p => p is null || p.Count == 0))
            throw new FormatException("operations has no measured points");
        foreach (var (operation, points) in Operations)
        {
            var seen = new HashSet<CacheConfig>();
            foreach (var p in points ?? new List<ModelPoint>())
            {
                string where = $"operations.{operation.ToString().ToLowerInvariant()}: point {p.Config}";
                if (!Space.Contains(p.Config))
                    throw new FormatException($"{where} is outside the space");
                if (!OnGrid(p.C, Space.MaxClientThreads) || !OnGrid(p.S, Space.MaxServerThreads) ||
                    !OnGrid(p.B, Space.MaxBatch) || !OnGrid(p.Q, Space.MaxQueueDepth))
                    throw new FormatException($"{where} is not on the grid (0, the powers of two and each parameter's maximum)");
                if (!(p.MeanUs > 0) || double.IsInfinity(p.MeanUs) || !(p.OpsPerSecond > 0) || double.IsInfinity(p.OpsPerSecond))
                    throw new FormatException($"{where} has meanUs {p.MeanUs} and opsPerSecond {p.OpsPerSecond}; both must be positive and finite");
                if (!seen.Add(p.Config))
                    throw new FormatException($"{where} is measured twice");
            }
        }
    }

    /// <summary>Whether <paramref name="value"/> is a grid value of a parameter whose largest value is <paramref name="max"/>: 0, a power of two, or the maximum itself.</summary>
    public static bool OnGrid(int value, int max) => value == max || value == 0 || (value > 0 && (value & (value - 1)) == 0);
}
