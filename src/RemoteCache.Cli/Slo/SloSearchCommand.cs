using System;
using System.CommandLine;
using System.Globalization;
using System.IO;
using System.Text;
using System.Text.Json;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// <c>remotecache slo search</c>: the cheapest configuration a model predicts to meet an SLO, or, when none does, the
/// nearest alternatives. Exit codes: <see cref="SloExitCodes"/>.
/// </summary>
internal static class SloSearchCommand
{
    private const string CommandName = "remotecache slo search";

    public static Command Create()
    {
        var model = new Option<FileInfo>("--model")
        {
            Description = "The performance model (a remotecache-slo-model JSON file)",
            Required = true,
        };
        var latency = new Option<double>("--latency-us")
        {
            Description = "The SLO's bound on the mean latency, µs (a configuration meets it at or below it)",
            Required = true,
        };
        var throughput = new Option<double>("--throughput")
        {
            Description = "The SLO's minimum throughput, operations per second (met at or above it)",
            Required = true,
        };
        var operation = new Option<string>("--operation")
        {
            Description = "The operation the SLO is for",
            DefaultValueFactory = _ => "read",
        };
        operation.AcceptOnlyFromAmong("read", "write");
        var recordSize = new Option<int?>("--record-size")
        {
            Description = "The SLO's record size, bytes; refused unless it is the model's (default: the model's)",
        };
        var serverPrice = new Option<double?>("--server-thread-price")
        {
            Description = "Price of a server thread: with --client-thread-price, the cheapest is the lowest s·price + c·price (ties in Redy's order); without both, Redy's order (fewest s, then c, b, q)",
        };
        var clientPrice = new Option<double?>("--client-thread-price")
        {
            Description = "Price of a client thread (with --server-thread-price)",
        };
        var json = new Option<bool>("--json") { Description = "Print the result as JSON" };
        var command = new Command("search",
            "The cheapest configuration the model predicts to meet an SLO (mean latency and throughput). " +
            "Exit code 0: found; 3: no configuration meets it (the nearest alternatives are printed); 2: bad arguments or model file")
        {
            model, latency, throughput, operation, recordSize, serverPrice, clientPrice, json,
        };
        command.Action = new SloCommandAction(CommandName, (parse, output) => Run(
            parse.GetRequiredValue(model),
            parse.GetValue(latency),
            parse.GetValue(throughput),
            parse.GetValue(operation) == "write" ? SloOperation.Write : SloOperation.Read,
            parse.GetValue(recordSize),
            parse.GetValue(serverPrice),
            parse.GetValue(clientPrice),
            parse.GetValue(json),
            output));
        return command;
    }

    private static int Run(FileInfo modelFile, double latencyUs, double throughput, SloOperation operation, int? recordSize,
        double? serverPrice, double? clientPrice, bool json, TextWriter output)
    {
        if (serverPrice.HasValue != clientPrice.HasValue)
            throw new UsageException("--server-thread-price and --client-thread-price go together: give both or neither");
        SloCost cost;
        try
        {
            cost = serverPrice is { } ps && clientPrice is { } pc ? new SloCost(ps, pc) : SloCost.Redy;
        }
        catch (ArgumentException e)
        {
            throw Refusal(e);
        }

        try
        {
            // The bounds are checked before the model is read (the record size is the model's unless given).
            _ = new ServiceLevelObjective(operation, latencyUs, throughput, recordSize ?? 1);
        }
        catch (ArgumentException e)
        {
            throw Refusal(e);
        }

        PerformanceModel model;
        try
        {
            model = PerformanceModel.Load(modelFile.FullName);
        }
        catch (FormatException e)
        {
            throw new UsageException($"the model file is not valid: {e.Message}", e);
        }
        if (recordSize is { } size && size != model.RecordSize)
            throw new UsageException(
                $"--record-size {size} is not the model's record size {model.RecordSize} ({modelFile.FullName}): a model answers for the record size it was measured with");
        if (model.Points(operation).Count == 0)
            throw new UsageException($"the model {modelFile.FullName} has no measured points for {Name(operation)}s");
        var objective = new ServiceLevelObjective(operation, latencyUs, throughput, model.RecordSize);

        var search = new SloSearch(new SloPredictor(model, operation), maxDegreeOfParallelism: 1);
        var result = search.Search(objective, cost);
        int exit = result.Found ? SloExitCodes.Success : SloExitCodes.NotMet;
        if (json)
            output.WriteLine(Json(result, model, modelFile.FullName, search, exit));
        else
            WriteText(output, result, model, modelFile.FullName, search);
        return exit;
    }

    private static void WriteText(TextWriter output, SloSearchResult result, PerformanceModel model, string path, SloSearch search)
    {
        var o = result.Objective;
        var text = new StringBuilder();
        text.AppendLine(Invariant($"SLO: {Name(o.Operation)}s of {o.RecordSize} B, mean latency ≤ {o.MaxMeanLatencyUs:G6} µs, throughput ≥ {Ops(o.MinOpsPerSecond)} ops/s"));
        text.AppendLine(Invariant($"model: {path} ({model.Transport}, {model.Distance}; {search.Predictor.MeasuredPoints} points measured, {search.ConfigurationCount} configurations predicted)"));
        text.AppendLine($"cost: {result.Cost}");
        if (result.Cheapest is { } cheapest)
        {
            text.AppendLine($"cheapest configuration meeting it: {Describe(cheapest, result.Cost)}");
        }
        else
        {
            text.AppendLine("none meets it: no configuration of the model is predicted to meet the SLO. Nearest:");
            text.AppendLine(result.LowestLatencyReachingThroughput is { } l
                ? Invariant($"  lowest mean latency at ≥ {Ops(o.MinOpsPerSecond)} ops/s: {Describe(l, result.Cost)}")
                : Invariant($"  no configuration reaches {Ops(o.MinOpsPerSecond)} ops/s"));
            text.AppendLine(result.HighestThroughputWithinLatency is { } h
                ? Invariant($"  highest throughput within {o.MaxMeanLatencyUs:G6} µs: {Describe(h, result.Cost)}")
                : Invariant($"  no configuration is within {o.MaxMeanLatencyUs:G6} µs"));
        }
        output.Write(text.ToString());
    }

    private static string Describe(SloCandidate candidate, SloCost cost)
    {
        var c = candidate.Config;
        string price = cost.ServerThreadPrice == 0 && cost.ClientThreadPrice == 0 ? "" : Invariant($", price {cost.Price(c):G6}");
        return Invariant($"{c} (predicted mean latency {candidate.Predicted.MeanUs:G4} µs, throughput {Ops(candidate.Predicted.OpsPerSecond)} ops/s{price})");
    }

    private static string Json(SloSearchResult result, PerformanceModel model, string path, SloSearch search, int exit)
    {
        using var stream = new MemoryStream();
        using (var w = new Utf8JsonWriter(stream, new JsonWriterOptions { Indented = true }))
        {
            var o = result.Objective;
            w.WriteStartObject();
            w.WriteBoolean("found", result.Found);
            w.WriteNumber("exitCode", exit);
            w.WriteStartObject("objective");
            w.WriteString("operation", Name(o.Operation));
            w.WriteNumber("maxMeanLatencyUs", o.MaxMeanLatencyUs);
            w.WriteNumber("minOpsPerSecond", o.MinOpsPerSecond);
            w.WriteNumber("recordSize", o.RecordSize);
            w.WriteEndObject();
            w.WriteStartObject("cost");
            bool redy = result.Cost.ServerThreadPrice == 0 && result.Cost.ClientThreadPrice == 0;
            w.WriteString("order", redy ? "redy" : "price");
            w.WriteNumber("serverThreadPrice", result.Cost.ServerThreadPrice);
            w.WriteNumber("clientThreadPrice", result.Cost.ClientThreadPrice);
            w.WriteEndObject();
            w.WriteStartObject("model");
            w.WriteString("path", path);
            w.WriteString("transport", model.Transport);
            w.WriteString("distance", model.Distance);
            w.WriteNumber("recordSize", model.RecordSize);
            w.WriteNumber("measuredPoints", search.Predictor.MeasuredPoints);
            w.WriteNumber("predictedConfigurations", search.ConfigurationCount);
            w.WriteEndObject();
            Candidate(w, "configuration", result.Cheapest, result.Cost);
            Candidate(w, "lowestLatencyReachingThroughput", result.LowestLatencyReachingThroughput, result.Cost);
            Candidate(w, "highestThroughputWithinLatency", result.HighestThroughputWithinLatency, result.Cost);
            w.WriteEndObject();
        }
        return Encoding.UTF8.GetString(stream.ToArray());
    }

    private static void Candidate(Utf8JsonWriter w, string name, SloCandidate? candidate, SloCost cost)
    {
        if (candidate is not { } c)
        {
            w.WriteNull(name);
            return;
        }
        w.WriteStartObject(name);
        w.WriteNumber("clientThreads", c.Config.ClientThreads);
        w.WriteNumber("serverThreads", c.Config.ServerThreads);
        w.WriteNumber("batchSize", c.Config.BatchSize);
        w.WriteNumber("queueDepth", c.Config.QueueDepth);
        w.WriteNumber("predictedMeanUs", c.Predicted.MeanUs);
        w.WriteNumber("predictedOpsPerSecond", c.Predicted.OpsPerSecond);
        if (cost.ServerThreadPrice != 0 || cost.ClientThreadPrice != 0)
            w.WriteNumber("price", cost.Price(c.Config));
        w.WriteEndObject();
    }

    private static string OptionOf(string? parameter) => parameter switch
    {
        "maxMeanLatencyUs" => "--latency-us",
        "minOpsPerSecond" => "--throughput",
        "recordSize" => "--record-size",
        "serverThreadPrice" => "--server-thread-price",
        "clientThreadPrice" => "--client-thread-price",
        _ => parameter ?? "argument",
    };

    /// <summary>An argument the library refused, named by its option: "--latency-us -1: the mean latency bound (µs) must be positive".</summary>
    private static UsageException Refusal(ArgumentException e)
    {
        // ArgumentException's message ends with " (Parameter '...')" and, out of range, "Actual value was ...".
        string reason = e.Message.Split('\n')[0];
        int suffix = reason.IndexOf(" (Parameter", StringComparison.Ordinal);
        if (suffix >= 0)
            reason = reason[..suffix];
        string value = e is ArgumentOutOfRangeException { ActualValue: IFormattable v } ? " " + v.ToString(null, CultureInfo.InvariantCulture) : "";
        return new UsageException($"{OptionOf(e.ParamName)}{value}: {reason.Trim()}", e);
    }

    internal static string Name(SloOperation operation) => operation == SloOperation.Read ? "read" : "write";

    internal static string Ops(double opsPerSecond) => opsPerSecond.ToString("#,0", CultureInfo.InvariantCulture);

    internal static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}
