using System;
using System.IO;
using System.Security.Cryptography;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>A server process keyed with a fresh admission key (and the key), removing the key file at the end.</summary>
[System.Runtime.Versioning.SupportedOSPlatform("linux")]
internal sealed class KeyedServer : IDisposable
{
    private readonly string _keyFile;

    public KeyedServer(string transport, string? serverId = null)
    {
        Key = RandomNumberGenerator.GetBytes(32);
        _keyFile = Path.Combine(Path.GetTempPath(), $"rc-admin-key-{Environment.ProcessId}-{Guid.NewGuid():N}");
        File.WriteAllBytes(_keyFile, Key);
        File.SetUnixFileMode(_keyFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        Process = ServerProcess.Start(transport, extraArgs: new[] { "--admission-key", _keyFile, "--server-id", serverId ?? $"admin-{transport}" });
    }

    public byte[] Key { get; }

    public ServerProcess Process { get; }

    /// <summary>A capability of this server for <paramref name="cacheId"/>.</summary>
    public string Capability(ulong cacheId, int regions, DateTimeOffset leaseEnd) =>
        RemoteCacheCapability.Mint(Key, cacheId, Process.ServerId, regions, leaseEnd);

    public RemoteCacheOptions CacheOptions(int regions, string name, DateTimeOffset leaseEnd)
    {
        var options = Options(regions, name: name);
        options.Capabilities = new[] { Capability(options.CacheId, regions, leaseEnd) };
        return options;
    }

    public void Dispose()
    {
        Process.Dispose();
        File.Delete(_keyFile);
    }
}
