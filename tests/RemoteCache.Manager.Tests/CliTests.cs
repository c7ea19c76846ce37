using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text.Json;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The <c>remotecache</c> command line as a process against a manager: a round trip with <c>--json</c>, and its refusals.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class CliTests
{
    private sealed record Result(int ExitCode, string Output, string Error);

    private static async Task<Result> RunAsync(IReadOnlyDictionary<string, string?> environment, params string[] args)
    {
        var start = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true };
        start.ArgumentList.Add("exec");
        start.ArgumentList.Add(Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll"));
        foreach (string a in args)
            start.ArgumentList.Add(a);
        start.Environment.Remove("REMOTECACHE_MANAGER");
        start.Environment.Remove("REMOTECACHE_API_KEY");
        foreach (var (name, value) in environment)
            start.Environment[name] = value;
        using var process = Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(60));
        return new Result(process.ExitCode, await output, await error);
    }

    private static Dictionary<string, string?> Env(TestManager manager, string key = AliceKey) => new()
    {
        ["REMOTECACHE_MANAGER"] = manager.Address!.ToString(),
        ["REMOTECACHE_API_KEY"] = key,
    };

    private static JsonElement Json(Result result)
    {
        Assert.True(result.ExitCode == 0, $"exit {result.ExitCode}: {result.Error}");
        return JsonDocument.Parse(result.Output).RootElement;
    }

    [Fact]
    public async Task CreateListReshapeWatchAndDeleteRoundTripWithJson()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        var env = Env(manager);

        var created = Json(await RunAsync(env, "create", "--capacity", "128MiB", "--read-latency-us", "50", "--throughput", "1e5",
                                          "--transport", "tcp", "--name", "cli", "--lease", "60s", "--json"));
        string id = created.GetProperty("cacheId").GetString()!;
        Assert.Equal(128 * MiB, created.GetProperty("capacity").GetInt64());
        Assert.Equal(1, created.GetProperty("servers").GetArrayLength());
        Assert.Equal("cli", created.GetProperty("name").GetString());
        Assert.Equal(50, created.GetProperty("slo").GetProperty("readLatencyUs").GetDouble());

        var listed = Json(await RunAsync(env, "caches", "--json"));
        Assert.Contains(listed.EnumerateArray(), c => c.GetProperty("cacheId").GetString() == id);

        // Flags instead of the environment, and human output.
        var text = await RunAsync(new Dictionary<string, string?>(), "caches", "--manager", manager.Address!.ToString(), "--api-key", AliceKey);
        Assert.Equal(0, text.ExitCode);
        Assert.Contains(id, text.Output);

        var reshaped = Json(await RunAsync(env, "reshape", id, "--capacity", "256MiB", "--json"));
        Assert.Equal(2, reshaped.GetProperty("servers").GetArrayLength());
        Assert.Equal(256 * MiB, reshaped.GetProperty("capacity").GetInt64());

        // Human tables line their columns up, whatever the widths of their cells.
        var table = await RunAsync(Env(manager, OpsKey), "servers");
        Assert.True(table.ExitCode == 0, table.Error);
        var lines = table.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.True(lines.Length >= 3, table.Output);
        foreach (string column in new[] { "STATE", "VM TYPE", "CACHE", "LENT", "ENDPOINTS" })
        {
            int at = lines[0].IndexOf(column, StringComparison.Ordinal);
            Assert.All(lines.Skip(1), line => Assert.True(line[at - 1] == ' ' && line[at] != ' ', $"column {column} at {at} in:\n{table.Output}"));
        }

        var deleted = await RunAsync(env, "delete", id);
        Assert.True(deleted.ExitCode == 0, deleted.Error);
        Assert.DoesNotContain(Json(await RunAsync(env, "caches", "--json")).EnumerateArray(), c => c.GetProperty("cacheId").GetString() == id);

        // The deleted cache's events, from its allocation to its deletion; the command ends with them.
        var watched = await RunAsync(env, "watch", id, "--json");
        Assert.True(watched.ExitCode == 0, watched.Error);
        var events = watched.Output.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => JsonDocument.Parse(l).RootElement).ToList();
        var kinds = events.Select(e => e.GetProperty("kind").GetString()).ToList();
        Assert.Equal("allocated", kinds[0]);
        Assert.Contains("reshaped", kinds);
        Assert.Equal("deleted", kinds[^1]);
        Assert.All(events, e => Assert.Equal(id, e.GetProperty("cacheId").GetString()));
    }

    [Fact]
    public async Task CreateWithARequestIdRunTwiceMakesOneCache()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var env = Env(manager);
        string[] create = { "create", "--capacity", "64MiB", "--transport", "tcp", "--request-id", "nightly-job-7", "--json" };

        var first = Json(await RunAsync(env, create));
        var again = Json(await RunAsync(env, create));
        Assert.Equal(first.GetProperty("cacheId").GetString(), again.GetProperty("cacheId").GetString());
        Assert.Single(Json(await RunAsync(env, "caches", "--json")).EnumerateArray());

        // The same id for another request is refused, and says why.
        var other = await RunAsync(env, "create", "--capacity", "128MiB", "--transport", "tcp", "--request-id", "nightly-job-7");
        Assert.NotEqual(0, other.ExitCode);
        Assert.Contains("capacity", other.Error);
    }

    [Fact]
    public async Task RefusalsSayWhatWasRefusedWithTheirExitCodes()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var env = Env(manager);

        var unknown = await RunAsync(env, "delete", "12345");
        Assert.Equal(4, unknown.ExitCode);
        Assert.Contains("cache 12345 does not exist", unknown.Error);

        var noKey = await RunAsync(new Dictionary<string, string?> { ["REMOTECACHE_MANAGER"] = manager.Address!.ToString() }, "caches");
        Assert.Equal(2, noKey.ExitCode);
        Assert.Contains("REMOTECACHE_API_KEY", noKey.Error);

        var badSize = await RunAsync(env, "create", "--capacity", "lots");
        Assert.Equal(2, badSize.ExitCode);
        Assert.Contains("--capacity 'lots'", badSize.Error);

        var wrongKey = await RunAsync(Env(manager, "not-a-key-0123456789"), "caches");
        Assert.Equal(4, wrongKey.ExitCode);

        var tenantAsOperator = await RunAsync(env, "servers");
        Assert.Equal(4, tenantAsOperator.ExitCode);
        Assert.Contains("PermissionDenied", tenantAsOperator.Error);

        var servers = Json(await RunAsync(Env(manager, OpsKey), "servers", "--json"));
        Assert.Equal(JsonValueKind.Array, servers.ValueKind);

        var down = await RunAsync(new Dictionary<string, string?> { ["REMOTECACHE_API_KEY"] = AliceKey }, "caches", "--manager", "http://127.0.0.1:1", "--timeout", "1");
        Assert.Equal(5, down.ExitCode);
        Assert.Contains("did not answer", down.Error);
        await using var client = manager.ManagedClient();
        Assert.Empty(await client.ListAsync());
    }

    [Fact]
    public async Task JoinTokensAreIssuedListedAndRevokedAndServeJoinsWithOne()
    {
        await using var manager = new TestManager(allocator: "static");
        manager.Options.HeartbeatInterval = TimeSpan.FromMilliseconds(500);
        manager.Options.HeartbeatTtl = TimeSpan.FromSeconds(10);  // the TTL is MembershipTests'; here a loaded machine must not fail the server
        await manager.StartAsync();
        var ops = Env(manager, OpsKey);
        string dir = Directory.CreateTempSubdirectory("join-").FullName;
        string tokenFile = Path.Combine(dir, "token");

        var issued = Json(await RunAsync(ops, "join-token", "issue", "--ttl", "1h", "--description", "cli test", "--out", tokenFile, "--json"));
        string tokenId = issued.GetProperty("tokenId").GetString()!;
        Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(tokenFile));
        Assert.StartsWith($"rcj_{tokenId}_", File.ReadAllText(tokenFile));
        Assert.False(issued.TryGetProperty("token", out _));  // written to the file, not printed
        var again = await RunAsync(ops, "join-token", "issue", "--out", tokenFile);
        Assert.Equal(2, again.ExitCode);
        Assert.Contains("exists", again.Error);

        // serve joins with it, prints its id, endpoints and "ready", and on SIGTERM leaves (forgotten by the manager) and stops.
        var start = new ProcessStartInfo("dotnet") { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in new[] { "exec", Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll"), "serve", "--join", manager.Address!.ToString(),
                                     "--join-token", tokenFile, "--listen", "tcp:127.0.0.1:0", "--lend", "256M", "--threads", "1", "--name", "cli-host",
                                     "--label", "zone=b" })
            start.ArgumentList.Add(a);
        using (var serve = Process.Start(start)!)
        {
            var lines = new List<string>();
            using (var timeout = new System.Threading.CancellationTokenSource(TimeSpan.FromSeconds(60)))
                while (await serve.StandardOutput.ReadLineAsync(timeout.Token) is { } line && line != "ready")
                    lines.Add(line);
            // Drained from now on, so that the server never blocks on its output or its log.
            var rest = serve.StandardOutput.ReadToEndAsync();
            var log = serve.StandardError.ReadToEndAsync();
            string serverId = lines.Single(l => l.StartsWith("server id ", StringComparison.Ordinal))["server id ".Length..];
            Assert.StartsWith("cli-host.", serverId);
            var servers = Json(await RunAsync(ops, "servers", "--json"));
            var listed = servers.EnumerateArray().Single();
            Assert.Equal(serverId, listed.GetProperty("serverId").GetString());
            Assert.Equal("ready", listed.GetProperty("state").GetString());
            Assert.True(listed.GetProperty("joined").GetBoolean());
            Assert.Equal("b", listed.GetProperty("labels").GetProperty("zone").GetString());
            var table = await RunAsync(ops, "servers");
            Assert.Contains("zone=b", table.Output);
            var tokens = Json(await RunAsync(ops, "join-token", "list", "--json"));
            Assert.Equal(1, tokens.EnumerateArray().Single().GetProperty("joins").GetInt32());

            Signal(serve.Id, "TERM");
            await serve.WaitForExitAsync().WaitAsync(TimeSpan.FromSeconds(30));
            Assert.Equal(0, serve.ExitCode);
            Assert.True((await rest).Trim().EndsWith("leaving\nleft\nstopped", StringComparison.Ordinal), $"serve's last words: {await rest} {await log}");
            Assert.Empty(Json(await RunAsync(ops, "servers", "--json")).EnumerateArray());
        }

        // Revoked: the next serve is refused, naming why (exit 4).
        var revoked = await RunAsync(ops, "join-token", "revoke", tokenId);
        Assert.Equal(0, revoked.ExitCode);
        var refused = await RunAsync(new Dictionary<string, string?>(), "serve", "--join", manager.Address!.ToString(), "--join-token", tokenFile,
                                     "--listen", "tcp:127.0.0.1:0", "--lend", "256M");
        Assert.Equal(4, refused.ExitCode);
        Assert.Contains($"join token {tokenId} was revoked", refused.Error);

        // A token file others can read is refused before anything is sent (exit 2), as a wildcard address is.
        File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.GroupRead);
        var open = await RunAsync(new Dictionary<string, string?>(), "serve", "--join", manager.Address!.ToString(), "--join-token", tokenFile, "--listen", "tcp:127.0.0.1:0");
        Assert.Equal(2, open.ExitCode);
        Assert.Contains("chmod 600", open.Error);
        File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        var wildcard = await RunAsync(new Dictionary<string, string?>(), "serve", "--join", manager.Address!.ToString(), "--join-token", tokenFile, "--listen", "tcp:0.0.0.0:0");
        Assert.Equal(2, wildcard.ExitCode);
        Assert.Contains("wildcard", wildcard.Error);
        Directory.Delete(dir, true);
    }

    [Fact]
    public async Task SeveralManagerAddressesAreTriedInTurnFromTheFlagsOrTheEnvironment()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var follower = await FakeReplica.StartAsync(leader: manager.Address);
        string dead = FakeReplica.DeadAddress().ToString();

        var flags = await RunAsync(new Dictionary<string, string?> { ["REMOTECACHE_API_KEY"] = AliceKey },
                                   "caches", "--json", "--manager", dead, "--manager", $"{follower.Address},{manager.Address}");
        Assert.Equal(JsonValueKind.Array, Json(flags).ValueKind);
        Assert.Equal(1, follower.Calls);

        var environment = Env(manager);
        environment["REMOTECACHE_MANAGER"] = $"{dead},{manager.Address}";
        Assert.Equal(JsonValueKind.Array, Json(await RunAsync(environment, "caches", "--json")).ValueKind);
    }
}
