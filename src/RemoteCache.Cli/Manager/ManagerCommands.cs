using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

using RemoteCache.Cli.Slo;

namespace RemoteCache.Cli.Manager;

/// <summary>
/// The cache manager's commands: <c>caches</c>, <c>create</c>, <c>reshape</c>, <c>delete</c>, <c>watch</c> (tenant) and
/// <c>servers</c>, <c>reclaim</c> (operator), each with human output or <c>--json</c>.
/// </summary>
internal static class ManagerCommands
{
    // Repeated (--manager A --manager B) or comma-separated (--manager A,B), or both: the replicas of one manager. One
    // address per token, so that a command's own arguments after it stay its own.
    public static readonly Option<string[]> Address = new("--manager")
    {
        Description = $"The manager's address; its replicas' addresses, repeated or separated by commas [default: ${RemoteCacheManagerOptions.AddressVariable}, else {RemoteCacheManagerOptions.DefaultAddress}]",
        HelpName = "URL[,URL…]",
        Recursive = true,
    };

    public static readonly Option<string?> ApiKey = new("--api-key")
    {
        Description = $"The API key [default: ${RemoteCacheManagerOptions.ApiKeyVariable}]",
        Recursive = true,
    };

    public static readonly Option<double?> Timeout = new("--timeout")
    {
        Description = "Seconds a call may take, retries on other replicas and waits for a manager that is down included [default: 30]",
        HelpName = "SECONDS",
        Recursive = true,
    };

    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web) { WriteIndented = true };

    /// <summary>Adds the commands, and the recursive --manager, --api-key and --timeout options, to <paramref name="root"/>.</summary>
    public static void AddTo(RootCommand root)
    {
        root.Add(Address);
        root.Add(ApiKey);
        root.Add(Timeout);
        root.Add(Caches());
        root.Add(Create());
        root.Add(Reshape());
        root.Add(Delete());
        root.Add(Watch());
        root.Add(Servers());
        root.Add(Reclaim());
    }

    private static Option<bool> JsonOption() => new("--json") { Description = "Print JSON instead of text" };

    private static Command Caches()
    {
        var json = JsonOption();
        var command = new Command("caches", "List this tenant's caches") { json };
        command.Action = new ManagerCommandAction("remotecache caches", async (parse, client, output, ct) =>
        {
            var caches = await client.ListAsync(ct).ConfigureAwait(false);
            if (parse.GetValue(json))
            {
                await output.WriteLineAsync(new JsonArray(caches.Select(c => (JsonNode)CacheJson(c)).ToArray()).ToJsonString(Json)).ConfigureAwait(false);
                return ManagerExitCodes.Success;
            }
            await output.WriteAsync(Table(new[] { "ID", "NAME", "CAPACITY", "SERVERS", "TRANSPORT", "CONFIG (c,s,b,q)", "LEASE ENDS (UTC)", "$/HOUR" },
                caches.Select(c => new[]
                {
                    c.CacheId.ToString(CultureInfo.InvariantCulture), c.Name, Units.Size(c.Capacity), c.Servers.Count.ToString(CultureInfo.InvariantCulture),
                    c.Transport, Config(c.Config), c.LeaseExpires.UtcDateTime.ToString("yyyy-MM-dd HH:mm:ss", CultureInfo.InvariantCulture),
                    c.PricePerHour.ToString("0.####", CultureInfo.InvariantCulture),
                }))).ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    // The SLO options of create and reshape.
    private sealed class SloOptions
    {
        public readonly Option<double?> ReadLatency = new("--read-latency-us") { Description = "Bound on the mean read latency, µs" };
        public readonly Option<double?> WriteLatency = new("--write-latency-us") { Description = "Bound on the mean write latency, µs" };
        public readonly Option<double?> Throughput = new("--throughput") { Description = "Operations per second the cache must sustain" };
        public readonly Option<int?> RecordSize = new("--record-size") { Description = "Bytes per operation the SLO is for [default: 8]" };

        public void AddTo(Command command)
        {
            command.Add(ReadLatency);
            command.Add(WriteLatency);
            command.Add(Throughput);
            command.Add(RecordSize);
        }

        public RemoteCacheSlo? Read(ParseResult parse)
        {
            double? read = parse.GetValue(ReadLatency), write = parse.GetValue(WriteLatency), throughput = parse.GetValue(Throughput);
            int? recordSize = parse.GetValue(RecordSize);
            if (read is null && write is null && throughput is null && recordSize is null)
                return null;
            var slo = new RemoteCacheSlo
            {
                ReadLatency = read is { } r ? TimeSpan.FromMicroseconds(r) : null,
                WriteLatency = write is { } w ? TimeSpan.FromMicroseconds(w) : null,
                Throughput = throughput ?? 0,
                RecordSize = recordSize ?? 8,
            };
            if (slo.Problem() is { } problem)
                throw new UsageException($"the SLO {problem}");
            return slo;
        }
    }

    private static Command Create()
    {
        var capacity = new Option<string>("--capacity") { Description = "Bytes (1GiB, 512MiB, …)", Required = true };
        var slo = new SloOptions();
        var duration = new Option<string?>("--duration") { Description = "How long the cache is likely needed (90s, 30m, 2h, 7d): a short one allows spot VMs [default: until deleted]" };
        var lease = new Option<string?>("--lease") { Description = "Lease length; the cache is freed when it ends unless a program opens the cache and renews it [default: the manager's]" };
        var name = new Option<string?>("--name") { Description = "A name for people" };
        var transport = new Option<string?>("--transport") { Description = "tcp, shm or verbs [default: the cheapest that meets the SLO]" };
        var populate = new Option<FileInfo?>("--populate-from") { Description = "A file whose prefix of the cache's capacity is written into it before the command returns" };
        var requestId = new Option<string?>("--request-id")
        {
            Description = "An idempotency key: running the same create again with it returns the cache it made, while that lives [default: a fresh one, kept across the command's own retries]",
        };
        var json = JsonOption();
        var command = new Command("create", "Create a cache for an SLO (Redy's Create) and print it") { capacity, duration, lease, name, transport, populate, requestId, json };
        slo.AddTo(command);
        command.Action = new ManagerCommandAction("remotecache create", async (parse, client, output, ct) =>
        {
            var request = new ManagedCacheRequest
            {
                Capacity = Units.ParseSize(parse.GetRequiredValue(capacity), "--capacity"),
                Slo = slo.Read(parse),
                Duration = parse.GetValue(duration) is { } d ? Units.ParseDuration(d, "--duration") : null,
                Lease = parse.GetValue(lease) is { } l ? Units.ParseDuration(l, "--lease") : null,
                Name = parse.GetValue(name),
                Transport = parse.GetValue(transport),
                PopulateFrom = parse.GetValue(populate)?.FullName,
                RequestId = parse.GetValue(requestId),
            };
            await using var cache = await client.CreateAsync(request, ct).ConfigureAwait(false);
            await PrintAsync(output, cache.Info, parse.GetValue(json), "created").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Argument<ulong> CacheIdArgument() => new("cache-id") { Description = "The cache's id (remotecache caches)" };

    private static Command Reshape()
    {
        var id = CacheIdArgument();
        var capacity = new Option<string?>("--capacity") { Description = "New capacity (1GiB, …): whole servers are added or removed at the end [default: unchanged]" };
        var slo = new SloOptions();
        var json = JsonOption();
        var command = new Command("reshape", "Grow, shrink or re-target a cache (Redy's Reshape); its open clients follow") { id, capacity, json };
        slo.AddTo(command);
        command.Action = new ManagerCommandAction("remotecache reshape", async (parse, client, output, ct) =>
        {
            long bytes = parse.GetValue(capacity) is { } c ? Units.ParseSize(c, "--capacity") : 0;
            var target = slo.Read(parse);
            if (bytes == 0 && target is null)
                throw new UsageException("nothing to change: give --capacity and/or an SLO (--read-latency-us, --write-latency-us, --throughput)");
            await using var cache = await client.OpenAsync(parse.GetValue(id), ct).ConfigureAwait(false);
            await cache.ReshapeAsync(bytes, target, ct).ConfigureAwait(false);
            await PrintAsync(output, cache.Info, parse.GetValue(json), "reshaped").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command Delete()
    {
        var id = CacheIdArgument();
        var command = new Command("delete", "Delete a cache (Redy's Delete): it is freed on every server at once") { id };
        command.Action = new ManagerCommandAction("remotecache delete", async (parse, client, output, ct) =>
        {
            await client.DeleteAsync(parse.GetValue(id), ct).ConfigureAwait(false);
            await output.WriteLineAsync($"deleted cache {parse.GetValue(id)}").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command Watch()
    {
        var id = CacheIdArgument();
        var from = new Option<long>("--from") { Description = "First event sequence (1: from the cache's allocation; 0: only new ones)", DefaultValueFactory = _ => 1 };
        var json = JsonOption();
        var command = new Command("watch", "Print a cache's events until it is deleted (Ctrl-C stops); a manager restart is bridged without losing events") { id, from, json };
        command.Action = new ManagerCommandAction("remotecache watch", async (parse, client, output, ct) =>
        {
            if (parse.GetValue(from) < 0)
                throw new UsageException("--from must be 0 or more");
            try
            {
                await foreach (var e in client.WatchAsync(parse.GetValue(id), parse.GetValue(from), ct).ConfigureAwait(false))
                {
                    await output.WriteLineAsync(parse.GetValue(json) ? EventJson(e).ToJsonString() : EventText(e)).ConfigureAwait(false);
                    await output.FlushAsync(ct).ConfigureAwait(false);
                }
            }
            catch (OperationCanceledException) when (ct.IsCancellationRequested)
            {
            }
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command Servers()
    {
        var json = JsonOption();
        var command = new Command("servers", "List the manager's servers (operator role)") { json };
        command.Action = new ManagerCommandAction("remotecache servers", async (parse, client, output, ct) =>
        {
            var servers = await client.ListServersAsync(ct).ConfigureAwait(false);
            if (parse.GetValue(json))
            {
                var array = new JsonArray(servers.Select(s =>
                {
                    var node = JsonSerializer.SerializeToNode(s, Json)!;
                    node["cacheId"] = s.CacheId.ToString(CultureInfo.InvariantCulture);
                    return node;
                }).ToArray());
                await output.WriteLineAsync(array.ToJsonString(Json)).ConfigureAwait(false);
                return ManagerExitCodes.Success;
            }
            await output.WriteAsync(Table(new[] { "SERVER", "STATE", "VM TYPE", "SPOT", "CACHE", "LENT", "ENDPOINTS", "LABELS" },
                servers.Select(s => new[]
                {
                    s.ServerId, s.State, s.VmType, s.Spot ? "yes" : "no", s.CacheId == 0 ? "-" : s.CacheId.ToString(CultureInfo.InvariantCulture),
                    Units.Size(s.MemoryLent), string.Join(" ", s.Endpoints.Values),
                    s.Joined ? string.Join(",", s.Labels.Select(l => $"{l.Key}={l.Value}").DefaultIfEmpty("joined")) : "-",
                }))).ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command Reclaim()
    {
        var server = new Argument<string>("server-id") { Description = "The server (remotecache servers)" };
        var notice = new Option<string>("--notice") { Description = "Time until it is reclaimed (30s, 5m, …)", DefaultValueFactory = _ => "30s" };
        var json = JsonOption();
        var command = new Command("reclaim", "Announce that a server will be reclaimed (operator role): its cache's watchers are told the deadline") { server, notice, json };
        command.Action = new ManagerCommandAction("remotecache reclaim", async (parse, client, output, ct) =>
        {
            var deadline = await client.ReclaimServerAsync(parse.GetRequiredValue(server), Units.ParseDuration(parse.GetRequiredValue(notice), "--notice"), ct).ConfigureAwait(false);
            await output.WriteLineAsync(parse.GetValue(json)
                ? new JsonObject { ["serverId"] = parse.GetValue(server), ["deadline"] = deadline }.ToJsonString(Json)
                : $"server {parse.GetValue(server)} will be reclaimed at {deadline.UtcDateTime:yyyy-MM-dd HH:mm:ss} UTC").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    // ---- output ------------------------------------------------------------------------------------------------

    private static async Task PrintAsync(TextWriter output, ManagedCacheInfo cache, bool json, string what)
    {
        if (json)
        {
            await output.WriteLineAsync(CacheJson(cache).ToJsonString(Json)).ConfigureAwait(false);
            return;
        }
        await output.WriteLineAsync(string.Create(CultureInfo.InvariantCulture,
            $"{what} cache {cache.CacheId}{(cache.Name.Length > 0 ? $" ({cache.Name})" : "")}: {Units.Size(cache.Capacity)} on {cache.Servers.Count} server(s) over {cache.Transport}, config {Config(cache.Config)}, ${cache.PricePerHour:0.####}/h")).ConfigureAwait(false);
        await output.WriteLineAsync(string.Create(CultureInfo.InvariantCulture,
            $"  predicted {cache.PredictedLatency.TotalMicroseconds:0.#} µs, {cache.PredictedThroughput:0} ops/s; lease ends {cache.LeaseExpires.UtcDateTime:yyyy-MM-dd HH:mm:ss} UTC")).ConfigureAwait(false);
        foreach (var s in cache.Servers)
            await output.WriteLineAsync($"  {s.ServerId}  {s.Endpoint}  {s.Regions} × {Units.Size(s.RegionSize)}  {s.VmType}{(s.Spot ? " (spot)" : "")}").ConfigureAwait(false);
    }

    /// <summary>A cache as JSON: ids as strings (63-bit integers do not survive JavaScript numbers), durations in µs.</summary>
    internal static JsonObject CacheJson(ManagedCacheInfo c) => new()
    {
        ["cacheId"] = c.CacheId.ToString(CultureInfo.InvariantCulture),
        ["name"] = c.Name,
        ["capacity"] = c.Capacity,
        ["transport"] = c.Transport,
        ["config"] = new JsonObject
        {
            ["clientThreads"] = c.Config.ClientThreads, ["serverThreads"] = c.Config.ServerThreads,
            ["batchSize"] = c.Config.BatchSize, ["queueDepth"] = c.Config.QueueDepth,
        },
        ["slo"] = new JsonObject
        {
            ["readLatencyUs"] = c.Slo.ReadLatency?.TotalMicroseconds, ["writeLatencyUs"] = c.Slo.WriteLatency?.TotalMicroseconds,
            ["throughput"] = c.Slo.Throughput, ["recordSize"] = c.Slo.RecordSize,
        },
        ["servers"] = new JsonArray(c.Servers.Select(s => (JsonNode)new JsonObject
        {
            ["serverId"] = s.ServerId, ["endpoint"] = s.Endpoint, ["regions"] = s.Regions, ["regionSize"] = s.RegionSize, ["vmType"] = s.VmType, ["spot"] = s.Spot,
        }).ToArray()),
        ["leaseExpires"] = c.LeaseExpires,
        ["created"] = c.Created,
        ["pricePerHour"] = c.PricePerHour,
        ["predictedLatencyUs"] = c.PredictedLatency.TotalMicroseconds,
        ["predictedThroughput"] = c.PredictedThroughput,
    };

    private static JsonObject EventJson(ManagedCacheEvent e)
    {
        var node = JsonSerializer.SerializeToNode(e, e.GetType(), Json)!.AsObject();
        node["cacheId"] = e.CacheId.ToString(CultureInfo.InvariantCulture);
        node["kind"] = Kind(e);
        return node;
    }

    private static string EventText(ManagedCacheEvent e)
    {
        string detail = e switch
        {
            CacheAllocatedEvent a => Units.Size(a.Capacity),
            CacheReshapedEvent r => $"{Units.Size(r.Capacity)} on {string.Join(", ", r.ServerIds)}",
            ConfigChangedEvent c => Config(c.Config),
            LeaseRenewedEvent l => $"until {l.Expires.UtcDateTime:HH:mm:ss}",
            LeaseExpiringEvent l => $"ends {l.Expires.UtcDateTime:HH:mm:ss}",
            ReclaimNoticeEvent r => $"{r.ServerId} (regions {r.FirstRegion}..{r.FirstRegion + r.Regions - 1}) at {r.Deadline.UtcDateTime:HH:mm:ss}",
            ServerFailedEvent f => $"{f.ServerId} (regions {f.FirstRegion}..{f.FirstRegion + f.Regions - 1}): {f.Reason}",
            ServerReplacedEvent r => $"{r.ServerId} -> {r.Replacement} (regions {r.FirstRegion}..{r.FirstRegion + r.Regions - 1}, {r.RegionsMoved} moved" +
                                     (r.LostRegions.Count == 0 ? ")" : $", lost {string.Join(',', r.LostRegions)})"),
            CacheDeletedEvent d => d.Reason,
            _ => "",
        };
        return string.Create(CultureInfo.InvariantCulture, $"{e.Sequence,6}  {e.Time.UtcDateTime:HH:mm:ss.fff}  {Kind(e),-15} {detail}");
    }

    private static string Kind(ManagedCacheEvent e) => e switch
    {
        CacheAllocatedEvent => "allocated",
        CacheReshapedEvent => "reshaped",
        ConfigChangedEvent => "config-changed",
        LeaseRenewedEvent => "lease-renewed",
        LeaseExpiringEvent => "lease-expiring",
        ReclaimNoticeEvent => "reclaim-notice",
        ServerFailedEvent => "server-failed",
        ServerReplacedEvent => "server-replaced",
        CacheDeletedEvent => "deleted",
        _ => "other",
    };

    private static string Config(CacheConfig c) => $"{c.ClientThreads},{c.ServerThreads},{c.BatchSize},{c.QueueDepth}";

    // Lines of columns, each as wide as its widest cell, two spaces apart.
    private static string Table(string[] headers, IEnumerable<string[]> rows)
    {
        var lines = new List<string[]> { headers };
        lines.AddRange(rows);
        var widths = headers.Select((_, i) => lines.Max(l => l[i].Length)).ToArray();
        var text = new System.Text.StringBuilder();
        foreach (var line in lines)
            text.AppendLine(string.Join("  ", line.Select((cell, i) => cell.PadRight(widths[i]))).TrimEnd());
        return text.ToString();
    }
}
