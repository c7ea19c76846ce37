using System;
using System.CommandLine;
using System.CommandLine.Invocation;
using System.IO;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;

using RemoteCache.Cli.Slo;

namespace RemoteCache.Cli.Manager;

/// <summary>Exit codes of the manager's commands (caches, create, reshape, delete, servers, reclaim, watch).</summary>
internal static class ManagerExitCodes
{
    public const int Success = 0;

    /// <summary>Bad arguments: nothing was sent.</summary>
    public const int Usage = 2;

    /// <summary>The manager refused (the message says why: quota, capacity, SLO, not found, key).</summary>
    public const int Refused = 4;

    /// <summary>The manager, or a server of the cache, could not be reached.</summary>
    public const int Unreachable = 5;
}

/// <summary>
/// The action of the manager's commands: parse errors and refusals are printed as "remotecache COMMAND: reason" and
/// mapped to <see cref="ManagerExitCodes"/>; the manager's addresses (one, or its replicas') and API key come from
/// --manager and --api-key, or the environment (<see cref="RemoteCacheManagerOptions.AddressVariable"/>, <see cref="RemoteCacheManagerOptions.ApiKeyVariable"/>).
/// </summary>
internal sealed class ManagerCommandAction : AsynchronousCommandLineAction
{
    private readonly string _name;
    private readonly Func<ParseResult, RemoteCacheManagerClient, TextWriter, CancellationToken, Task<int>> _run;

    public ManagerCommandAction(string name, Func<ParseResult, RemoteCacheManagerClient, TextWriter, CancellationToken, Task<int>> run)
    {
        _name = name;
        _run = run;
    }

    public override bool ClearsParseErrors => true;

    public override async Task<int> InvokeAsync(ParseResult parseResult, CancellationToken cancellationToken = default)
    {
        var error = parseResult.InvocationConfiguration.Error;
        if (ParseProblems.Report(parseResult, _name, error))
            return ManagerExitCodes.Usage;
        try
        {
            await using var client = new RemoteCacheManagerClient(Options(parseResult));
            return await _run(parseResult, client, parseResult.InvocationConfiguration.Output, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is UsageException or ArgumentException)
        {
            await error.WriteLineAsync($"{_name}: {e.Message}").ConfigureAwait(false);
            return ManagerExitCodes.Usage;
        }
        catch (RemoteCacheManagerException e)
        {
            await error.WriteLineAsync($"{_name}: {e.Message}").ConfigureAwait(false);
            return e.Status is StatusCode.Unavailable or StatusCode.DeadlineExceeded ? ManagerExitCodes.Unreachable : ManagerExitCodes.Refused;
        }
        catch (RemoteCacheException e)
        {
            await error.WriteLineAsync($"{_name}: {e.Message}").ConfigureAwait(false);
            return ManagerExitCodes.Unreachable;
        }
    }

    // The options from the flags, else the environment (read through `environment`: tests give their own).
    internal static RemoteCacheManagerOptions Options(ParseResult parse, Func<string, string?>? environment = null)
    {
        environment ??= Environment.GetEnvironmentVariable;
        string[]? flags = parse.GetValue(ManagerCommands.Address);
        var (addresses, from) = flags is { Length: > 0 }
            ? (string.Join(",", flags), "--manager")
            : (environment(RemoteCacheManagerOptions.AddressVariable), RemoteCacheManagerOptions.AddressVariable);
        string? key = parse.GetValue(ManagerCommands.ApiKey) ?? environment(RemoteCacheManagerOptions.ApiKeyVariable);
        var options = new RemoteCacheManagerOptions { ApiKey = string.IsNullOrEmpty(key) ? null : key };
        if (parse.GetValue(ManagerCommands.Timeout) is { } seconds)
        {
            if (!(seconds > 0 && seconds <= 3600))
                throw new UsageException($"--timeout {seconds}: seconds, more than 0 and at most 3600");
            options.CallTimeout = TimeSpan.FromSeconds(seconds);
        }
        if (!string.IsNullOrEmpty(addresses))
        {
            try
            {
                options.Addresses = RemoteCacheManagerOptions.ParseAddresses(addresses);
            }
            catch (FormatException e)
            {
                throw new UsageException($"{from}: {e.Message}");
            }
        }
        if (options.ApiKey is null)
            throw new UsageException($"no API key: give --api-key or set {RemoteCacheManagerOptions.ApiKeyVariable} (remotecache-manager prints the key it generates on first start)");
        return options;
    }
}
