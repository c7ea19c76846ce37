using System;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// A one-member etcd (Debian's etcd-server, which scripts/test.sh installs) on free loopback ports with its data in a
/// temporary directory, for the etcd store's tests; stopped and removed on dispose.
/// </summary>
public sealed class EtcdProcess : IAsyncDisposable
{
    private const string Binary = "/usr/bin/etcd";
    private readonly Process _process;
    private readonly string _dir;

    private EtcdProcess(Process process, string dir, string endpoint)
    {
        _process = process;
        _dir = dir;
        Endpoint = endpoint;
    }

    /// <summary>Its client URL.</summary>
    public string Endpoint { get; }

    public static async Task<EtcdProcess> StartAsync()
    {
        if (!File.Exists(Binary))
            throw new FileNotFoundException($"{Binary} not found: install the Debian package 'etcd-server' (scripts/test.sh does)");
        string dir = Directory.CreateTempSubdirectory("etcd-").FullName;
        int client = FreePort(), peer = FreePort();
        var start = new ProcessStartInfo(Binary) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in new[]
                 {
                     "--name", "test", "--data-dir", Path.Combine(dir, "data"),
                     "--listen-client-urls", $"http://127.0.0.1:{client}", "--advertise-client-urls", $"http://127.0.0.1:{client}",
                     "--listen-peer-urls", $"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", $"http://127.0.0.1:{peer}",
                     "--initial-cluster", $"test=http://127.0.0.1:{peer}", "--pre-vote=true",
                 })
            start.ArgumentList.Add(a);
        var process = Process.Start(start)!;
        // Its log is drained, never read: a full pipe would stop it.
        _ = process.StandardOutput.ReadToEndAsync();
        _ = process.StandardError.ReadToEndAsync();
        var etcd = new EtcdProcess(process, dir, $"http://127.0.0.1:{client}");
        var waited = Stopwatch.StartNew();
        while (true)
        {
            try
            {
                await using var probe = await EtcdManagerStore.OpenAsync(etcd.Endpoint, "/probe/", CancellationToken.None);
                return etcd;
            }
            catch (StoreUnavailableException) when (waited.Elapsed < TimeSpan.FromSeconds(20) && !process.HasExited)
            {
                await Task.Delay(100);
            }
            catch
            {
                await etcd.DisposeAsync();
                throw;
            }
        }
    }

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
            _process.Kill();
        await _process.WaitForExitAsync();
        _process.Dispose();
        Directory.Delete(_dir, recursive: true);
    }

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}
