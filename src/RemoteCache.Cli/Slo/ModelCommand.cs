using System;
using System.Collections.Generic;
using System.CommandLine;
using System.CommandLine.Parsing;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>What <c>remotecache slo model</c> was asked to do, defaults resolved.</summary>
internal sealed record ModelSettings(
    string Transport, string? VerbsAddress, int RecordSize, string Out, IReadOnlyList<SloOperation> Operations, ConfigurationSpace Space,
    double Seconds, double Warmup, int Repeats, bool Resume, string BenchPath, string? Note, string CommandLine);

/// <summary>
/// <c>remotecache slo model</c>: measures a performance model (Redy §5.2's offline modeling) with remotecache-bench
/// over the power-of-two grid of (c, s, b, q), cheapest first, stopping along a parameter once throughput stops
/// improving, and saves it after every point.
/// </summary>
internal static class ModelCommand
{
    /// <summary>Per run, on top of seconds and warm-up: starting and stopping the bench's server (~0.1 s here).</summary>
    private const double SpawnSeconds = 0.1;

    /// <summary>The command, measuring with remotecache-bench.</summary>
    public static Command Create() => Create(settings =>
    {
        if (!File.Exists(settings.BenchPath))
            throw new MeasurementException($"{settings.BenchPath}: no such file: {BenchMeasurer.ToolName} is built next to remotecache-server " +
                                           "by building src/RemoteCache (or pass --bench PATH)");
        return new BenchMeasurer(settings.BenchPath, settings.Transport, settings.VerbsAddress, settings.RecordSize, settings.Seconds, settings.Warmup);
    });

    /// <summary>The command, measuring with what <paramref name="measurers"/> gives (tests pass a fake).</summary>
    internal static Command Create(Func<ModelSettings, IPointMeasurer> measurers)
    {
        var transport = new Option<string>("--transport")
        {
            Description = "The transport to model: shm (shared memory on this host), tcp (loopback) or verbs (RDMA, through the device of --verbs-address)",
            Required = true,
        }.AcceptOnlyFromAmong("shm", "tcp", "verbs");
        var verbsAddress = VerbsAddressOption.Create();
        var recordSize = new Option<int>("--record-size")
        {
            Description = "Bytes per read or write; the model holds only this size",
            Required = true,
            HelpName = "N",
        };
        recordSize.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<int>() < 1)
                r.AddError("--record-size must be at least 1");
        });
        var output = new Option<string>("--out")
        {
            Description = "The model file to write (saved after every point; refused if it exists, unless --resume)",
            Required = true,
            HelpName = "FILE",
        };
        var operations = new Option<string>("--operations")
        {
            Description = "What to measure: read, write or read,write",
            DefaultValueFactory = _ => "read,write",
            HelpName = "read,write",
        };
        operations.Validators.Add(r =>
        {
            if (ParseOperations(r.GetValueOrDefault<string>() ?? "", out string? problem) is null)
                r.AddError(problem!);
        });
        var maxClient = Limit("--max-client-threads", "C", "Client threads at most (c = 0, 1, 2, 4, ... up to C)",
                              "the number of cores; 0 with --quick", 0, CacheConfig.MaxClientThreads);
        var maxServer = Limit("--max-server-threads", "S", "Server threads at most (s = 0 where the transport has one-sided access, then 1, 2, 4, ... up to S)",
                              "the number of cores; 1 with --quick", 1, CacheConfig.MaxServerThreads);
        var maxBatch = Limit("--max-batch", "B", "Batch size at most (b = 1, 2, 4, ... up to B; only 1 when s = 0)",
                             $"⌈4096 / record size⌉, at most {CacheConfig.MaxBatchSize}; 4 with --quick", 1, CacheConfig.MaxBatchSize);
        var maxQueue = Limit("--max-queue-depth", "Q", "Queue depth at most (q = 1, 2, 4, ... up to Q)",
                             $"{CacheConfig.MaxQueueDepth}; 4 with --quick", 1, CacheConfig.MaxQueueDepth);
        var seconds = new Option<double?>("--seconds")
        {
            Description = "Measured seconds per point [default: 0.5; 0.2 with --quick]",
            HelpName = "T",
        };
        seconds.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<double?>() is { } v && !(v > 0 && v <= 3600))
                r.AddError("--seconds must be more than 0 (and at most 3600)");
        });
        var warmup = new Option<double?>("--warmup")
        {
            Description = "Unmeasured seconds before each point [default: 0.2; 0.1 with --quick]",
            HelpName = "T",
        };
        warmup.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<double?>() is { } v && !(v >= 0 && v <= 3600))
                r.AddError("--warmup must be 0 or more (and at most 3600)");
        });
        var repeats = new Option<int?>("--repeats")
        {
            Description = "Runs per point; the point keeps their median latency and median throughput [default: 3; 1 with --quick]",
            HelpName = "N",
        };
        repeats.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<int?>() is { } v && v is < 1 or > 100)
                r.AddError("--repeats must be between 1 and 100");
        });
        var quick = new Option<bool>("--quick")
        {
            Description = "A tiny grid for CI (c = 0, s ≤ 1, b ≤ 4, q ≤ 4, 0.2 s per point): seconds, not minutes",
        };
        var resume = new Option<bool>("--resume")
        {
            Description = "Continue the model in --out: points already in it are not measured again",
        };
        var bench = new Option<string?>("--bench")
        {
            Description = $"The {BenchMeasurer.ToolName} to run [default: the one built next to remotecache-server]",
            HelpName = "PATH",
        };
        var note = new Option<string?>("--note")
        {
            Description = "A note on the machine for the model (other load, a VM, ...); what /proc tells is added",
            HelpName = "TEXT",
        };

        var command = new Command("model",
            "Measure a performance model of this host's data path with remotecache-bench (Redy §5.2's offline modeling): " +
            "the power-of-two grid of (c, s, b, q), cheapest first, stopping along a parameter once throughput stops improving. " +
            $"Early termination: {SweepRule.Default}.")
        {
            transport, verbsAddress, recordSize, output, operations, maxClient, maxServer, maxBatch, maxQueue, seconds, warmup, repeats, quick, resume, bench, note,
        };
        command.Validators.Add(r =>
        {
            if (VerbsAddressOption.Mismatch(r.GetValue(transport) == "verbs", r.GetValue(verbsAddress), "--transport verbs") is { } mismatch)
                r.AddError(mismatch);
            int size = r.GetValue(recordSize);
            if (size >= 1 && r.GetValue(maxBatch) is { } b && b > BatchLimit(size))
                r.AddError($"--max-batch {b} is above the largest batch for {size} B records, {BatchLimit(size)} (⌈4096 / {size}⌉, at most {CacheConfig.MaxBatchSize})");
        });
        command.SetAction(async (parse, cancellationToken) =>
        {
            bool isQuick = parse.GetValue(quick);
            int size = parse.GetValue(recordSize);
            string transportName = parse.GetValue(transport)!;
            int cores = Environment.ProcessorCount;
            var space = new ConfigurationSpace(
                MaxClientThreads: parse.GetValue(maxClient) ?? (isQuick ? 0 : Math.Min(cores, CacheConfig.MaxClientThreads)),
                MinServerThreads: MinServerThreads(transportName),
                MaxServerThreads: parse.GetValue(maxServer) ?? (isQuick ? 1 : Math.Min(cores, CacheConfig.MaxServerThreads)),
                MaxBatch: parse.GetValue(maxBatch) ?? (isQuick ? Math.Min(4, BatchLimit(size)) : BatchLimit(size)),
                MaxQueueDepth: parse.GetValue(maxQueue) ?? (isQuick ? 4 : CacheConfig.MaxQueueDepth));
            var settings = new ModelSettings(
                transportName, parse.GetValue(verbsAddress), size, parse.GetValue(output)!, ParseOperations(parse.GetValue(operations)!, out _)!, space,
                Seconds: parse.GetValue(seconds) ?? (isQuick ? 0.2 : 0.5),
                Warmup: parse.GetValue(warmup) ?? (isQuick ? 0.1 : 0.2),
                Repeats: parse.GetValue(repeats) ?? (isQuick ? 1 : 3),
                Resume: parse.GetValue(resume),
                BenchPath: parse.GetValue(bench) ?? BenchMeasurer.DefaultPath,
                Note: parse.GetValue(note),
                CommandLine: CommandLineOf(parse));
            var config = parse.InvocationConfiguration;
            return await RunAsync(settings, measurers, config.Output, config.Error, cancellationToken).ConfigureAwait(false);
        });
        return command;
    }

    /// <summary>Transports without a one-sided path (tcp) cannot run s = 0: there it acts as s = 1, so it is not modelled.</summary>
    internal static int MinServerThreads(string transport) => transport == "tcp" ? 1 : 0;

    /// <summary>The largest batch for the record size: ⌈4096 / size⌉, within the native limit.</summary>
    internal static int BatchLimit(int recordSize) => Math.Min(ConfigurationSpace.BatchLimit(recordSize), CacheConfig.MaxBatchSize);

    internal static async Task<int> RunAsync(ModelSettings settings, Func<ModelSettings, IPointMeasurer> measurers,
                                             TextWriter output, TextWriter error, CancellationToken cancellationToken)
    {
        string file = settings.Out;
        if (Path.GetDirectoryName(Path.GetFullPath(file)) is { } directory && !Directory.Exists(directory))
        {
            error.WriteLine($"{file}: the directory {directory} does not exist");
            return 1;
        }
        PerformanceModel? previous = null;
        if (File.Exists(file))
        {
            if (!settings.Resume)
            {
                error.WriteLine($"{file} exists: pass --resume to continue it, or remove it to measure a new model");
                return 1;
            }
            try
            {
                previous = PerformanceModel.Load(file);
            }
            catch (FormatException e)
            {
                error.WriteLine($"cannot resume: {e.Message}");
                return 1;
            }
            if (ResumeProblem(previous, settings) is { } problem)
            {
                error.WriteLine($"cannot resume {file}: {problem}");
                return 1;
            }
        }

        IPointMeasurer measurer;
        try
        {
            measurer = new RepeatedMeasurer(measurers(settings), settings.Repeats);
        }
        catch (MeasurementException e)
        {
            error.WriteLine(e.Message);
            return 1;
        }

        var machine = MachineInfo.Describe(settings.Note);
        if (previous is not null && (previous.Machine.Cpu != machine.Cpu || previous.Machine.Cores != machine.Cores))
            error.WriteLine($"warning: {file} was measured on {previous.Machine.Cpu} ({previous.Machine.Cores} cores); this is {machine.Cpu} ({machine.Cores} cores)");
        var operations = new Dictionary<SloOperation, List<ModelPoint>>();
        if (previous is not null)
            foreach (var (op, points) in previous.Operations)
                operations[op] = new List<ModelPoint>(points);
        foreach (var op in settings.Operations)
            if (!operations.ContainsKey(op))
                operations[op] = new List<ModelPoint>();
        var measured = new MeasurementInfo(DateTime.UtcNow.ToString("yyyy-MM-dd", CultureInfo.InvariantCulture), settings.CommandLine,
                                           BenchMeasurer.ToolName, settings.Seconds, settings.Warmup) { Repeats = settings.Repeats };
        PerformanceModel Model() => new()
        {
            Transport = settings.Transport,
            Distance = "same-host",
            RecordSize = settings.RecordSize,
            Machine = machine,
            Measured = measured,
            Space = settings.Space,
            Operations = operations,
        };

        var grid = new ModelGrid(settings.Space);
        var progress = new Progress(settings, grid, operations, () => Model().Save(file), output);
        progress.Header(previous);
        var sweep = new ModelSweep(grid, SweepRule.Default, measurer);
        // Ctrl+C cancels through System.CommandLine; SIGTERM and SIGHUP (a closed terminal, `kill`) would end the process
        // at once and leave the running bench behind, so they cancel too: the bench is stopped and the model stays saved.
        using var stop = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        using var onTerm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Cancel);
        using var onHup = PosixSignalRegistration.Create(PosixSignal.SIGHUP, Cancel);
        void Cancel(PosixSignalContext context)
        {
            context.Cancel = true;
            stop.Cancel();
        }
        cancellationToken = stop.Token;
        try
        {
            foreach (var op in settings.Operations)
            {
                var known = operations[op].ToDictionary(p => p.Config);
                await sweep.RunAsync(op, known, progress, cancellationToken).ConfigureAwait(false);
            }
        }
        catch (MeasurementException e)
        {
            error.WriteLine(e.Message);
            error.WriteLine(progress.Saved());
            return 1;
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            error.WriteLine("interrupted; " + progress.Saved());
            return 130;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            error.WriteLine($"cannot save {file}: {e.Message}");
            return 1;
        }
        if (progress.Measured > 0)
        {
            machine = MachineInfo.WithLoadAtEnd(machine);
            try
            {
                Model().Save(file);
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                error.WriteLine($"cannot save {file}: {e.Message}");
                return 1;
            }
        }
        progress.Summary();
        return 0;
    }

    /// <summary>Why <paramref name="previous"/> cannot be continued by <paramref name="settings"/>, or null.</summary>
    internal static string? ResumeProblem(PerformanceModel previous, ModelSettings settings)
    {
        if (previous.Transport != settings.Transport || previous.RecordSize != settings.RecordSize)
            return $"it is a {previous.Transport} model of {previous.RecordSize} B records; this command measures {settings.Transport} with {settings.RecordSize} B records";
        if (previous.Distance != "same-host")
            return $"it was measured at distance '{previous.Distance}'; this command measures same-host";
        if (previous.Space != settings.Space)
            return $"its space is {Describe(previous.Space)}; this command's is {Describe(settings.Space)}";
        if (previous.Measured.SecondsPerPoint != settings.Seconds || previous.Measured.WarmupSeconds != settings.Warmup)
            return string.Create(CultureInfo.InvariantCulture,
                $"its points were measured for {previous.Measured.SecondsPerPoint} s after {previous.Measured.WarmupSeconds} s of warm-up; this command measures for {settings.Seconds} s after {settings.Warmup} s");
        if (previous.Measured.Repeats != settings.Repeats)
            return $"its points are the median of {previous.Measured.Repeats} run(s); this command takes {settings.Repeats}";
        return null;
    }

    internal static string Describe(ConfigurationSpace space) =>
        $"c ≤ {space.MaxClientThreads}, s {space.MinServerThreads}..{space.MaxServerThreads}, b ≤ {space.MaxBatch}, q ≤ {space.MaxQueueDepth}";

    /// <summary>The operations in "read,write", or null and why not.</summary>
    internal static IReadOnlyList<SloOperation>? ParseOperations(string text, out string? problem)
    {
        var result = new List<SloOperation>();
        foreach (string word in text.Split(',', StringSplitOptions.TrimEntries))
        {
            SloOperation op;
            if (word.Equals("read", StringComparison.OrdinalIgnoreCase))
                op = SloOperation.Read;
            else if (word.Equals("write", StringComparison.OrdinalIgnoreCase))
                op = SloOperation.Write;
            else
            {
                problem = $"--operations: '{word}' is not read or write (give read, write or read,write)";
                return null;
            }
            if (!result.Contains(op))
                result.Add(op);
        }
        problem = null;
        return result;
    }

    /// <summary>"remotecache" and the arguments as given, quoted where a shell needs it.</summary>
    private static string CommandLineOf(ParseResult parse) =>
        string.Join(" ", new[] { "remotecache" }.Concat(parse.Tokens.Select(t => Quote(t.Value))));

    private static string Quote(string word) =>
        word.Length > 0 && word.All(ch => char.IsAsciiLetterOrDigit(ch) || "-_./,=:+@%".Contains(ch)) ? word : "'" + word.Replace("'", "'\\''") + "'";

    private static Option<int?> Limit(string name, string helpName, string description, string defaultText, int min, int max)
    {
        var option = new Option<int?>(name) { Description = $"{description} [default: {defaultText}]", HelpName = helpName };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<int?>() is { } v && (v < min || v > max))
                r.AddError($"{name} must be {min}..{max}");
        });
        return option;
    }

    /// <summary>Saves each measured point and prints a line per point, the cuts, and a summary.</summary>
    private sealed class Progress : ISweepObserver
    {
        private readonly ModelSettings _settings;
        private readonly ModelGrid _grid;
        private readonly Dictionary<SloOperation, List<ModelPoint>> _operations;
        private readonly Action _save;
        private readonly TextWriter _output;
        private readonly Stopwatch _clock = Stopwatch.StartNew();
        private readonly int _total;
        private readonly Dictionary<SloOperation, (int Measured, int Resumed, int Cut)> _counts = new();
        private readonly Dictionary<string, (int Sweeps, int Points)> _cutsByParameter = new();
        private int _done, _cut, _measured;
        private TimeSpan _lastMark;
        private double _measuringSeconds;

        public Progress(ModelSettings settings, ModelGrid grid, Dictionary<SloOperation, List<ModelPoint>> operations, Action save, TextWriter output)
        {
            _settings = settings;
            _grid = grid;
            _operations = operations;
            _save = save;
            _output = output;
            _total = grid.Count * settings.Operations.Count;
            foreach (var op in settings.Operations)
                _counts[op] = (0, 0, 0);
        }

        /// <summary>Points measured (not resumed) by this run.</summary>
        public int Measured => _measured;

        private double GuessSecondsPerPoint => _settings.Repeats * (_settings.Seconds + _settings.Warmup + SpawnSeconds);

        public void Header(PerformanceModel? previous)
        {
            var s = _settings;
            _output.WriteLine(Invariant($"{s.Transport} model of {s.RecordSize} B records ({string.Join(", ", s.Operations.Select(Name))}) into {s.Out}"));
            _output.WriteLine($"space: {Describe(s.Space)}" + (s.Transport == "tcp" ? " (tcp has no one-sided path: s = 0 acts as s = 1 and is not modelled)" : ""));
            _output.WriteLine($"grid: s ∈ {{{string.Join(", ", _grid.ServerThreads)}}}, c ∈ {{{string.Join(", ", _grid.ClientThreads)}}}, " +
                              $"b ∈ {{{string.Join(", ", _grid.Batches(_grid.ServerThreads[^1]))}}}{(_grid.ServerThreads[0] == 0 ? " (b = 1 when s = 0)" : "")}, q ∈ {{{string.Join(", ", _grid.QueueDepths)}}}: " +
                              $"{_grid.Count} points per operation");
            _output.WriteLine(Invariant(
                $"at most {_total} points of ~{GuessSecondsPerPoint:0.0#} s ({(s.Repeats == 1 ? "" : $"the median of {s.Repeats} runs of ")}{s.Seconds:0.###} s + {s.Warmup:0.###} s warm-up + ~{SpawnSeconds:0.#} s to start a server): ≤ {Clock(_total * GuessSecondsPerPoint)}; ") + Invariant(
                $"early termination measures fewer ({SweepRule.Default})"));
            if (previous is not null)
                _output.WriteLine($"resuming {s.Out}: " + string.Join(", ", previous.Operations.Select(kv => $"{kv.Value.Count} {Name(kv.Key)} points")) + " already measured");
            _lastMark = _clock.Elapsed;
        }

        public void OnPoint(SloOperation operation, ModelPoint point, bool resumed)
        {
            var now = _clock.Elapsed;
            var counts = _counts[operation];
            _done++;
            if (resumed)
            {
                _counts[operation] = counts with { Resumed = counts.Resumed + 1 };
                _lastMark = now;
                return;
            }
            _operations[operation].Add(point);
            _save();
            _counts[operation] = counts with { Measured = counts.Measured + 1 };
            _measured++;
            _measuringSeconds += (now - _lastMark).TotalSeconds;
            _lastMark = _clock.Elapsed;
            int left = _total - _done - _cut;
            double perPoint = _measuringSeconds / _measured;
            int width = _total.ToString(CultureInfo.InvariantCulture).Length;
            _output.WriteLine(Invariant(
                $"[{_done.ToString(CultureInfo.InvariantCulture).PadLeft(width)}/≤{(_done + left).ToString(CultureInfo.InvariantCulture).PadLeft(width)}] ") + Invariant(
                $"{Name(operation),-5} {point.Config,-20} {point.OpsPerSecond / 1e6,8:0.000} Mops/s  mean {point.MeanUs,9:0.00} µs  ") + Invariant(
                $"p50 {point.P50Us ?? double.NaN,8:0.00}  p99 {point.P99Us ?? double.NaN,9:0.00}   {Clock(_clock.Elapsed.TotalSeconds)} elapsed, ≤ {Clock(left * perPoint)} left"));
        }

        public void OnCut(SweepCut cut)
        {
            _cut += cut.SkippedPoints;
            var counts = _counts[cut.Operation];
            _counts[cut.Operation] = counts with { Cut = counts.Cut + cut.SkippedPoints };
            var byParameter = _cutsByParameter.GetValueOrDefault(cut.Parameter);
            _cutsByParameter[cut.Parameter] = (byParameter.Sweeps + 1, byParameter.Points + cut.SkippedPoints);
            _output.WriteLine("  early termination: " + cut);
        }

        public string Saved()
        {
            int points = _operations.Values.Sum(p => p.Count);
            return points == 0 || !File.Exists(_settings.Out)
                ? "nothing saved"
                : $"{points} points are saved in {_settings.Out}; the same command with --resume continues it";
        }

        public void Summary()
        {
            foreach (var (op, c) in _counts)
                _output.WriteLine($"{Name(op)}: {c.Measured + c.Resumed} points ({c.Measured} measured now" +
                                  (c.Resumed > 0 ? $", {c.Resumed} from the file" : "") +
                                  $") of a {_grid.Count}-point grid; early termination left out {c.Cut}");
            if (_cutsByParameter.Count > 0)
                _output.WriteLine("early termination by parameter: " + string.Join(", ",
                    new[] { "q", "b", "c", "s" }.Where(_cutsByParameter.ContainsKey)
                        .Select(p => $"{p}: {_cutsByParameter[p].Sweeps} sweeps stopped, {_cutsByParameter[p].Points} points")));
            _output.WriteLine($"took {Clock(_clock.Elapsed.TotalSeconds)}; model in {_settings.Out}");
        }

        private static string Name(SloOperation op) => op.ToString().ToLowerInvariant();

        private static string Clock(double seconds)
        {
            var t = TimeSpan.FromSeconds(Math.Max(0, Math.Round(seconds)));
            return t.TotalHours >= 1 ? t.ToString(@"h\:mm\:ss", CultureInfo.InvariantCulture) : t.ToString(@"m\:ss", CultureInfo.InvariantCulture);
        }

        private static string Invariant(FormattableString text) => text.ToString(CultureInfo.InvariantCulture);
    }
}
