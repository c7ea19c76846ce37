using System;
using System.Collections.Generic;
using System.CommandLine;
using System.CommandLine.Invocation;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using Microsoft.Extensions.Logging;

using RemoteCache.Cli.Slo;

namespace RemoteCache.Cli.Manager;

/// <summary>
/// Servers that join by themselves (Linux: token files are checked and written with Unix modes): <c>join-token issue|list|revoke</c> (operator role) and <c>serve --join</c>, a cache
/// server in this process that joins its managers with a token (<see cref="JoinedServer"/>).
/// </summary>
[System.Runtime.Versioning.SupportedOSPlatform("linux")]
internal static class JoinCommands
{
    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web) { WriteIndented = true };

    public static void AddTo(RootCommand root)
    {
        var tokens = new Command("join-token", "Join tokens (operator role): a server that presents one joins the pool by itself (remotecache serve --join)");
        tokens.Add(Issue());
        tokens.Add(List());
        tokens.Add(Revoke());
        root.Add(tokens);
        root.Add(Serve());
    }

    private static Option<bool> JsonOption() => new("--json") { Description = "Print JSON instead of text" };

    private static Command Issue()
    {
        var ttl = new Option<string>("--ttl") { Description = "How long joins are accepted with it (90s, 30m, 24h, 7d; at most 365d)", DefaultValueFactory = _ => "24h" };
        var description = new Option<string?>("--description") { Description = "What it is for (at most 200 characters)" };
        var output = new Option<string?>("--out") { Description = "Write the token to this file (mode 600) instead of printing it", HelpName = "FILE" };
        var json = JsonOption();
        var command = new Command("issue", "Issue a join token; its text is shown (or written) this once") { ttl, description, output, json };
        command.Action = new ManagerCommandAction("remotecache join-token issue", async (parse, client, text, ct) =>
        {
            string? file = parse.GetValue(output);
            if (file is not null && File.Exists(file))
                throw new UsageException($"--out {file} exists; a token is never written over another file");
            var issued = await client.IssueJoinTokenAsync(Units.ParseDuration(parse.GetRequiredValue(ttl), "--ttl"), parse.GetValue(description), ct).ConfigureAwait(false);
            if (file is not null)
            {
                using (var stream = new FileStream(file, new FileStreamOptions
                {
                    Mode = FileMode.CreateNew, Access = FileAccess.Write, UnixCreateMode = UnixFileMode.UserRead | UnixFileMode.UserWrite,
                }))
                using (var writer = new StreamWriter(stream))
                    await writer.WriteLineAsync(issued.Text).ConfigureAwait(false);
            }
            if (parse.GetValue(json))
            {
                var node = TokenJson(issued.Token);
                if (file is null)
                    node["token"] = issued.Text;
                else
                    node["file"] = file;
                await text.WriteLineAsync(node.ToJsonString(Json)).ConfigureAwait(false);
            }
            else
            {
                await text.WriteLineAsync(file is null ? issued.Text : $"wrote join token {issued.Token.TokenId} to {file}").ConfigureAwait(false);
                await text.WriteLineAsync($"token {issued.Token.TokenId}: joins accepted until {issued.Token.Expires.UtcDateTime:yyyy-MM-dd HH:mm:ss} UTC; it is shown only now")
                          .ConfigureAwait(false);
            }
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command List()
    {
        var json = JsonOption();
        var command = new Command("list", "List the join tokens: live ones, and ended ones for a day after they ended") { json };
        command.Action = new ManagerCommandAction("remotecache join-token list", async (parse, client, text, ct) =>
        {
            var tokens = await client.ListJoinTokensAsync(ct).ConfigureAwait(false);
            if (parse.GetValue(json))
            {
                await text.WriteLineAsync(new JsonArray(tokens.Select(t => (JsonNode)TokenJson(t)).ToArray()).ToJsonString(Json)).ConfigureAwait(false);
                return ManagerExitCodes.Success;
            }
            var now = DateTimeOffset.UtcNow;
            foreach (var t in tokens)
                await text.WriteLineAsync(string.Create(CultureInfo.InvariantCulture,
                    $"{t.TokenId}  {(t.Revoked is not null ? "revoked" : t.Expires <= now ? "expired" : "live"),-7}  until {t.Expires.UtcDateTime:yyyy-MM-dd HH:mm:ss}  {t.Joins} joins  {t.Description}")).ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static Command Revoke()
    {
        var id = new Argument<string>("token-id") { Description = "The token's id (remotecache join-token list)" };
        var command = new Command("revoke", "Revoke a join token: later joins with it are refused; servers that joined with it stay") { id };
        command.Action = new ManagerCommandAction("remotecache join-token revoke", async (parse, client, text, ct) =>
        {
            var token = await client.RevokeJoinTokenAsync(parse.GetRequiredValue(id), ct).ConfigureAwait(false);
            await text.WriteLineAsync($"join token {token.TokenId} revoked at {token.Revoked!.Value.UtcDateTime:yyyy-MM-dd HH:mm:ss} UTC").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static JsonObject TokenJson(JoinTokenInfo t) => new()
    {
        ["tokenId"] = t.TokenId, ["description"] = t.Description, ["created"] = t.Created, ["expires"] = t.Expires, ["revoked"] = t.Revoked, ["joins"] = t.Joins,
    };

    private static Command Serve()
    {
        var join = new Option<string[]>("--join") { Description = "The managers to join: an address, or its replicas' (repeated or comma-separated)", HelpName = "URL[,URL…]", Required = true };
        var tokenFile = new Option<string>("--join-token") { Description = "A file holding the join token (mode 600: not readable by group or others)", HelpName = "FILE", Required = true };
        var listen = new Option<string[]>("--listen") { Description = "An endpoint to listen on: a tcp one on an address the managers and clients reach is required (tcp:HOST:PORT); shm and verbs may be added", Required = true };
        var lend = new Option<string>("--lend")
        {
            Description = "Bytes lent at most (K, M, G suffixes), or auto: what this host does not use (its memory cgroup's headroom, else its available memory) less --reserve, given back as the host's own processes need it",
            HelpName = "SIZE|auto",
            DefaultValueFactory = _ => "4G",
        };
        var reserve = new Option<string>("--reserve") { Description = "With --lend auto: bytes of this host never lent, kept for its own processes; past half of it gone, a cache is dropped rather than a process killed", DefaultValueFactory = _ => "1G" };
        var region = new Option<string>("--region-size") { Description = "Bytes per region: the manager's catalogue's", DefaultValueFactory = _ => "64M" };
        var threads = new Option<int>("--threads") { Description = "Server threads at most, and the cores the server offers [default: hardware threads]" };
        var name = new Option<string?>("--name") { Description = "The server id's prefix, for people [default: the host's name]" };
        var vmType = new Option<string?>("--vm-type") { Description = "A catalogue VM type to lend as [default: the largest the memory and cores allow]" };
        var labels = new Option<string[]>("--label") { Description = "A label the manager keeps with the server, e.g. zone=a (repeated)", HelpName = "KEY=VALUE" };
        var spot = new Option<bool>("--spot") { Description = "Lend as a spot VM: memory this host may want back" };
        var commit = new Option<bool>("--commit-memory") { Description = "Commit memory ahead for new caches (remotecache-server --commit-memory)" };
        var verbose = new Option<bool>("--verbose") { Description = "Log every heartbeat's refusal and the server's events" };
        var leaveTimeout = new Option<double>("--leave-timeout")
        {
            Description = "Seconds a stop (SIGTERM, Ctrl-C) waits for the managers to move this server's cache away and forget it; 0: stop at once (the managers fail it after the heartbeat TTL)",
            HelpName = "SECONDS",
            DefaultValueFactory = _ => 60,
        };
        var command = new Command("serve", "Run a cache server that joins the managers by itself with a join token, keeps itself registered with heartbeats, and joins again as a new incarnation if the managers fail it; runs until stopped (SIGTERM, Ctrl-C)")
        {
            join, tokenFile, listen, lend, reserve, region, threads, name, vmType, labels, spot, commit, verbose, leaveTimeout,
        };
        command.Action = new ServeAction(async (parse, output, ct) =>
        {
            double leave = parse.GetValue(leaveTimeout);
            if (!(leave >= 0 && leave <= 3600))
                throw new UsageException($"--leave-timeout {leave} must be 0 to 3600 seconds");
            var options = new JoinedServerOptions
            {
                Managers = Addresses(parse.GetValue(join)!),
                JoinToken = ReadToken(parse.GetRequiredValue(tokenFile)),
                Listen = parse.GetValue(listen)!.ToList(),
                LendAuto = parse.GetRequiredValue(lend) == "auto",
                MemoryLimit = parse.GetRequiredValue(lend) == "auto" ? long.MaxValue / 4 : Units.ParseSize(parse.GetRequiredValue(lend), "--lend"),
                Reserve = Units.ParseSize(parse.GetRequiredValue(reserve), "--reserve"),
                RegionSize = Units.ParseSize(parse.GetRequiredValue(region), "--region-size"),
                MaxThreads = parse.GetValue(threads),
                VmType = parse.GetValue(vmType),
                Spot = parse.GetValue(spot),
                CommitMemory = parse.GetValue(commit),
                Labels = Labels(parse.GetValue(labels) ?? Array.Empty<string>()),
            };
            if (parse.GetValue(name) is { } n)
                options.Name = n;
            // The log goes to stderr: stdout carries the lines scripts wait for (server id, listening, ready, stopped).
            using var loggers = LoggerFactory.Create(b => b
                .AddSimpleConsole(o => { o.SingleLine = true; o.TimestampFormat = "HH:mm:ss.fff "; })
                .AddConsole(o => o.LogToStandardErrorThreshold = LogLevel.Trace)
                .SetMinimumLevel(parse.GetValue(verbose) ? LogLevel.Information : LogLevel.Warning));
            options.LoggerFactory = loggers;
            await using var server = await JoinedServer.JoinAsync(options, ct).ConfigureAwait(false);
            server.Rejoined += id => output.WriteLine($"joined again as {id} (the managers had failed the last incarnation; what it held is gone)");
            await output.WriteLineAsync($"server id {server.ServerId}").ConfigureAwait(false);
            foreach (string endpoint in server.Endpoints)
                await output.WriteLineAsync($"listening {endpoint}").ConfigureAwait(false);
            await output.WriteLineAsync($"joined as a {server.VmType}{(options.Spot ? " (spot)" : "")}, lending at most {server.Lending} bytes{(options.LendAuto ? $" now (what the host spares less a reserve of {options.Reserve})" : "")}").ConfigureAwait(false);
            await output.WriteLineAsync("ready").ConfigureAwait(false);
            await output.FlushAsync(CancellationToken.None).ConfigureAwait(false);
            try
            {
                await Task.Delay(Timeout.Infinite, ct).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
            }
            if (leave > 0)
            {
                await output.WriteLineAsync("leaving").ConfigureAwait(false);
                await output.FlushAsync(CancellationToken.None).ConfigureAwait(false);
                bool left = await server.LeaveAsync(TimeSpan.FromSeconds(leave), CancellationToken.None).ConfigureAwait(false);
                await output.WriteLineAsync(left ? "left" : $"did not leave within {leave} s: the managers fail this server after the heartbeat TTL").ConfigureAwait(false);
            }
            await output.WriteLineAsync("stopped").ConfigureAwait(false);
            return ManagerExitCodes.Success;
        });
        return command;
    }

    private static List<Uri> Addresses(string[] flags)
    {
        try
        {
            return RemoteCacheManagerOptions.ParseAddresses(string.Join(",", flags)).ToList();
        }
        catch (FormatException e)
        {
            throw new UsageException($"--join: {e.Message}");
        }
    }

    private static Dictionary<string, string> Labels(string[] flags)
    {
        var labels = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (string flag in flags)
        {
            int eq = flag.IndexOf('=');
            if (eq <= 0 || eq == flag.Length - 1)
                throw new UsageException($"--label '{flag}' is not KEY=VALUE");
            if (!labels.TryAdd(flag[..eq], flag[(eq + 1)..]))
                throw new UsageException($"--label {flag[..eq]} is given twice");
        }
        return labels;
    }

    // The token's first line; the file must be the owner's alone, as the admission key's is.
    private static string ReadToken(string path)
    {
        try
        {
            if ((File.GetUnixFileMode(path) & (UnixFileMode.GroupRead | UnixFileMode.GroupWrite | UnixFileMode.OtherRead | UnixFileMode.OtherWrite)) != 0)
                throw new UsageException($"--join-token {path} is readable or writable by group or others: chmod 600 it (a join token lets anyone add a server)");
            using var reader = new StreamReader(path);
            var buffer = new char[300];
            int read = reader.ReadBlock(buffer, 0, buffer.Length);
            string token = new string(buffer, 0, read).Split('\n')[0].Trim();
            if (token.Length == 0 || read == buffer.Length)
                throw new UsageException($"--join-token {path} does not hold a join token on its first line (rcj_…, at most 256 characters)");
            return token;
        }
        catch (IOException e)
        {
            throw new UsageException($"--join-token {path}: {e.Message}");
        }
        catch (UnauthorizedAccessException e)
        {
            throw new UsageException($"--join-token {path}: {e.Message}");
        }
    }

    // serve's action: no API key (the join token is its credential); refusals map to the manager commands' exit codes.
    private sealed class ServeAction(Func<ParseResult, TextWriter, CancellationToken, Task<int>> run) : AsynchronousCommandLineAction
    {
        public override bool ClearsParseErrors => true;

        public override async Task<int> InvokeAsync(ParseResult parseResult, CancellationToken cancellationToken = default)
        {
            const string name = "remotecache serve";
            var error = parseResult.InvocationConfiguration.Error;
            if (ParseProblems.Report(parseResult, name, error))
                return ManagerExitCodes.Usage;
            // SIGTERM and SIGINT end the server cleanly ("stopped", exit 0) on every runtime: the default action of SIGTERM
            // on .NET 8 ends the process with 143 before a command's cancellation is seen through.
            using var stop = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            void Stop(PosixSignalContext context)
            {
                context.Cancel = true;
                stop.Cancel();
            }
            using var term = PosixSignalRegistration.Create(PosixSignal.SIGTERM, Stop);
            using var interrupt = PosixSignalRegistration.Create(PosixSignal.SIGINT, Stop);
            try
            {
                return await run(parseResult, parseResult.InvocationConfiguration.Output, stop.Token).ConfigureAwait(false);
            }
            catch (Exception e) when (e is UsageException or ArgumentException)
            {
                await error.WriteLineAsync($"{name}: {e.Message}").ConfigureAwait(false);
                return ManagerExitCodes.Usage;
            }
            catch (RemoteCacheManagerException e)
            {
                await error.WriteLineAsync($"{name}: {e.Message}").ConfigureAwait(false);
                return e.Status is StatusCode.Unavailable or StatusCode.DeadlineExceeded ? ManagerExitCodes.Unreachable : ManagerExitCodes.Refused;
            }
            catch (RemoteCacheException e)
            {
                await error.WriteLineAsync($"{name}: the server could not start: {e.Message}").ConfigureAwait(false);
                return 1;
            }
            catch (OperationCanceledException) when (stop.IsCancellationRequested)
            {
                await parseResult.InvocationConfiguration.Output.WriteLineAsync("stopped").ConfigureAwait(false);  // before it joined
                return ManagerExitCodes.Success;
            }
        }
    }
}
