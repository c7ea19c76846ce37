using System;
using System.Collections.Generic;
using System.ComponentModel;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// Measures a configuration with the native <c>remotecache-bench</c>: one run per point, each spawning its own
/// <c>remotecache-server</c> (the one next to the tool) on this host, one application thread keeping b·q operations
/// in flight on random record-aligned addresses of a 256 MiB cache.
/// </summary>
internal sealed class BenchMeasurer : IPointMeasurer
{
    private const int SigTerm = 15;

    /// <summary>Past seconds + warm-up: the server may take 10 s to start and the bench 15 s to drain.</summary>
    private static readonly TimeSpan s_slack = TimeSpan.FromSeconds(40);

    private readonly string _path;
    private readonly string _transport;
    private readonly string? _verbsAddress;
    private readonly int _recordSize;
    private readonly double _seconds;
    private readonly double _warmup;

    /// <param name="verbsAddress">With verbs: the RDMA device's IPv4 address the bench's server listens on.</param>
    public BenchMeasurer(string path, string transport, string? verbsAddress, int recordSize, double seconds, double warmup)
    {
        _path = path;
        _transport = transport;
        _verbsAddress = verbsAddress;
        _recordSize = recordSize;
        _seconds = seconds;
        _warmup = warmup;
    }

    /// <summary>The tool's name in models (<see cref="MeasurementInfo.Tool"/>).</summary>
    public const string ToolName = "remotecache-bench";

    /// <summary>Where remotecache-bench takes the address its verbs server listens on.</summary>
    internal const string VerbsAddressVariable = "RC_VERBS_ADDR";

    /// <summary>Where the build puts the tool: next to remotecache-server in the native runtime directory.</summary>
    public static string DefaultPath => Path.Combine(Path.GetDirectoryName(RemoteCacheServer.ExecutablePath) ?? ".", ToolName);

    /// <summary>The tool's arguments for one point.</summary>
    public IReadOnlyList<string> Arguments(SloOperation operation, CacheConfig config) => new[]
    {
        "--transport", _transport,
        "--op", operation == SloOperation.Read ? "read" : "write",
        "--size", _recordSize.ToString(CultureInfo.InvariantCulture),
        "--batch", config.BatchSize.ToString(CultureInfo.InvariantCulture),
        "--qdepth", config.QueueDepth.ToString(CultureInfo.InvariantCulture),
        "--client-threads", config.ClientThreads.ToString(CultureInfo.InvariantCulture),
        "--server-threads", config.ServerThreads.ToString(CultureInfo.InvariantCulture),
        "--seconds", _seconds.ToString("0.###", CultureInfo.InvariantCulture),
        "--warmup", _warmup.ToString("0.###", CultureInfo.InvariantCulture),
        "--json",
    };

    /// <summary>How the tool is started for one point: its arguments, and over verbs the address its server binds to.</summary>
    internal ProcessStartInfo StartInfo(SloOperation operation, CacheConfig config)
    {
        var start = new ProcessStartInfo(_path)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = false,
            UseShellExecute = false,
        };
        foreach (string a in Arguments(operation, config))
            start.ArgumentList.Add(a);
        if (_verbsAddress is not null)
            start.Environment[VerbsAddressVariable] = _verbsAddress;
        return start;
    }

    public async Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken)
    {
        var start = StartInfo(operation, config);
        string what = $"{operation.ToString().ToLowerInvariant()} {config}";
        string commandLine = (_verbsAddress is null ? "" : $"{VerbsAddressVariable}={_verbsAddress} ") + string.Join(" ", new[] { _path }.Concat(start.ArgumentList));

        using var process = new Process { StartInfo = start };
        try
        {
            process.Start();
        }
        catch (Win32Exception e)
        {
            throw new MeasurementException($"cannot run {_path} for {what}: {e.Message}", e);
        }
        var stdout = process.StandardOutput.ReadToEndAsync(CancellationToken.None);
        var stderr = process.StandardError.ReadToEndAsync(CancellationToken.None);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(TimeSpan.FromSeconds(_seconds + _warmup) + s_slack);
        try
        {
            await process.WaitForExitAsync(timeout.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException)
        {
            await StopAsync(process).ConfigureAwait(false);
            if (cancellationToken.IsCancellationRequested)
                throw;
            throw new MeasurementException(
                $"{ToolName} did not finish {what} within {(TimeSpan.FromSeconds(_seconds + _warmup) + s_slack).TotalSeconds:0} s; stopped it\n" +
                $"  ran: {commandLine}\n{Indent(await stderr.ConfigureAwait(false))}");
        }
        string output = await stdout.ConfigureAwait(false);
        string errors = await stderr.ConfigureAwait(false);
        if (process.ExitCode != 0)
            throw new MeasurementException($"{ToolName} failed for {what} (exit code {process.ExitCode})\n  ran: {commandLine}\n{Indent(errors)}");
        try
        {
            return Parse(output, operation, config);
        }
        catch (FormatException e)
        {
            throw new MeasurementException($"{ToolName} gave no usable result for {what}: {e.Message}\n  ran: {commandLine}\n{Indent(errors)}", e);
        }
    }

    /// <summary>The point in the tool's <c>--json</c> line, checked against the configuration asked for.</summary>
    /// <exception cref="FormatException">Not a result for <paramref name="config"/>, or one with nothing measured.</exception>
    internal ModelPoint Parse(string output, SloOperation operation, CacheConfig config)
    {
        string? line = output.Split('\n').Select(l => l.Trim()).LastOrDefault(l => l.StartsWith('{'));
        if (line is null)
            throw new FormatException($"no JSON line in its output '{output.Trim()}'");
        try
        {
            using var json = JsonDocument.Parse(line);
            var r = json.RootElement;
            string op = r.GetProperty("op").GetString() ?? "";
            var echoed = new CacheConfig(r.GetProperty("client_threads").GetInt32(), r.GetProperty("server_threads").GetInt32(),
                                         r.GetProperty("batch").GetInt32(), r.GetProperty("qdepth").GetInt32());
            if (echoed != config || op != (operation == SloOperation.Read ? "read" : "write") ||
                r.GetProperty("size").GetInt32() != _recordSize || r.GetProperty("transport").GetString() != _transport)
                throw new FormatException($"it measured something else: {line}");
            long ops = r.GetProperty("ops").GetInt64();
            double opsPerSecond = r.GetProperty("ops_per_sec").GetDouble(), meanUs = r.GetProperty("mean_us").GetDouble();
            if (ops <= 0 || !(opsPerSecond > 0) || !(meanUs > 0))
                throw new FormatException($"no operation completed in the measured {r.GetProperty("seconds").GetDouble():0.###} s: {line}");
            return new ModelPoint(config.ClientThreads, config.ServerThreads, config.BatchSize, config.QueueDepth, meanUs, opsPerSecond)
            {
                P50Us = r.GetProperty("p50_us").GetDouble(),
                P99Us = r.GetProperty("p99_us").GetDouble(),
            };
        }
        catch (Exception e) when (e is JsonException or KeyNotFoundException or InvalidOperationException)
        {
            throw new FormatException($"cannot read '{line}': {e.Message}", e);
        }
    }

    /// <summary>SIGTERM first, so the tool stops its server and removes its socket; SIGKILL if it lingers.</summary>
    private static async Task StopAsync(Process process)
    {
        try
        {
            if (process.HasExited)
                return;
            _ = Kill(process.Id, SigTerm);
            using var grace = new CancellationTokenSource(TimeSpan.FromSeconds(3));
            try
            {
                await process.WaitForExitAsync(grace.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                process.Kill(entireProcessTree: true);
                await process.WaitForExitAsync(CancellationToken.None).ConfigureAwait(false);
            }
        }
        catch (InvalidOperationException)
        {
            // it exited meanwhile
        }
    }

    private static string Indent(string text)
    {
        var lines = text.Split('\n').Select(l => l.TrimEnd('\r')).Where(l => l.Length > 0).ToList();
        if (lines.Count == 0)
            return "  (nothing on stderr)";
        const int keep = 30;
        var shown = lines.Count > keep ? new[] { $"  ... ({lines.Count - keep} earlier lines)" }.Concat(lines.Skip(lines.Count - keep)) : lines;
        return "  stderr:\n" + string.Join("\n", shown.Select(l => "    " + l));
    }

    [DllImport("libc", EntryPoint = "kill", SetLastError = true)]
    private static extern int Kill(int pid, int signal);
}
