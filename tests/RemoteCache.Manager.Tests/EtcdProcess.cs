using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Threading;
using System.Threading.Tasks;
using dotnet_etcd;
using Etcdserverpb;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// A one-member etcd (Debian's etcd-server, which scripts/test.sh installs) on free loopback ports with its data in a
/// temporary directory, for the etcd store's tests; stopped and removed on dispose. With <c>tls</c>, it serves https
/// with a certificate of a CA made for it and checks clients' certificates; with <c>auth</c>, user root (password
/// <see cref="RootPassword"/>) is needed.
/// </summary>
public sealed class EtcdProcess : IAsyncDisposable
{
    public const string RootPassword = "root-password-0123";
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

    /// <summary>With TLS: the CA, and a client certificate and key it signed (PEM files).</summary>
    public string? CaFile { get; private set; }

    public string? ClientCertFile { get; private set; }

    public string? ClientKeyFile { get; private set; }

    /// <summary>With auth: a file holding <see cref="RootPassword"/>.</summary>
    public string? RootPasswordFile { get; private set; }

    /// <summary>What reaches it as user root with its client certificate (whatever it asks for).</summary>
    public EtcdConnection Connection => new(Endpoint)
    {
        CaFile = CaFile, CertFile = ClientCertFile, KeyFile = ClientKeyFile,
        User = RootPasswordFile is null ? null : "root", PasswordFile = RootPasswordFile,
    };

    public static async Task<EtcdProcess> StartAsync(bool tls = false, bool auth = false)
    {
        if (!File.Exists(Binary))
            throw new FileNotFoundException($"{Binary} not found: install the Debian package 'etcd-server' (scripts/test.sh does)");
        string dir = Directory.CreateTempSubdirectory("etcd-").FullName;
        int client = FreePort(), peer = FreePort();
        string scheme = tls ? "https" : "http";
        var args = new List<string>
        {
            "--name", "test", "--data-dir", Path.Combine(dir, "data"),
            "--listen-client-urls", $"{scheme}://127.0.0.1:{client}", "--advertise-client-urls", $"{scheme}://127.0.0.1:{client}",
            "--listen-peer-urls", $"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", $"http://127.0.0.1:{peer}",
            "--initial-cluster", $"test=http://127.0.0.1:{peer}", "--pre-vote=true",
        };
        string? ca = null, clientCert = null, clientKey = null;
        if (tls)
        {
            (ca, string serverCert, string serverKey, clientCert, clientKey) = Certificates(dir);
            args.AddRange(new[] { "--cert-file", serverCert, "--key-file", serverKey, "--trusted-ca-file", ca, "--client-cert-auth" });
        }
        var start = new ProcessStartInfo(Binary) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in args)
            start.ArgumentList.Add(a);
        var process = Process.Start(start)!;
        // Its log is drained, never read: a full pipe would stop it.
        _ = process.StandardOutput.ReadToEndAsync();
        _ = process.StandardError.ReadToEndAsync();
        var etcd = new EtcdProcess(process, dir, $"{scheme}://127.0.0.1:{client}") { CaFile = ca, ClientCertFile = clientCert, ClientKeyFile = clientKey };
        try
        {
            await etcd.WaitReadyAsync();
            if (auth)
                await etcd.EnableAuthAsync();
            return etcd;
        }
        catch
        {
            await etcd.DisposeAsync();
            throw;
        }
    }

    private async Task WaitReadyAsync()
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            try
            {
                await using var probe = await EtcdManagerStore.OpenAsync(Connection, "/probe/", CancellationToken.None);
                return;
            }
            catch (StoreUnavailableException) when (waited.Elapsed < TimeSpan.FromSeconds(20) && !_process.HasExited)
            {
                await Task.Delay(100);
            }
        }
    }

    // User root with the root role, then auth on: from then on every call needs root's password (or token).
    private async Task EnableAuthAsync()
    {
        using (var client = Connection.CreateClient())
        {
            await client.UserAddAsync(new AuthUserAddRequest { Name = "root", Password = RootPassword });
            await client.UserGrantRoleAsync(new AuthUserGrantRoleRequest { User = "root", Role = "root" });
            await client.AuthEnableAsync(new AuthEnableRequest());
        }
        RootPasswordFile = Path.Combine(_dir, "root.password");
        File.WriteAllText(RootPasswordFile, RootPassword + "\n");
        File.SetUnixFileMode(RootPasswordFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
    }

    // A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files in `dir`.
    private static (string Ca, string ServerCert, string ServerKey, string ClientCert, string ClientKey) Certificates(string dir)
    {
        var now = DateTimeOffset.UtcNow;
        using var caKey = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var caRequest = new CertificateRequest("CN=remotecache test etcd CA", caKey, HashAlgorithmName.SHA256);
        caRequest.CertificateExtensions.Add(new X509BasicConstraintsExtension(true, false, 0, true));
        caRequest.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.KeyCertSign | X509KeyUsageFlags.CrlSign, true));
        using var ca = caRequest.CreateSelfSigned(now.AddHours(-1), now.AddDays(1));

        (string Cert, string Key) Issue(string name, string subject, string usage, bool loopback)
        {
            using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
            var request = new CertificateRequest($"CN={subject}", key, HashAlgorithmName.SHA256);
            request.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension(new OidCollection { new Oid(usage) }, false));
            if (loopback)
            {
                var names = new SubjectAlternativeNameBuilder();
                names.AddIpAddress(IPAddress.Loopback);
                request.CertificateExtensions.Add(names.Build());
            }
            using var certificate = request.Create(ca, now.AddHours(-1), now.AddDays(1), RandomNumberGenerator.GetBytes(8));
            string certPath = Path.Combine(dir, name + ".pem"), keyPath = Path.Combine(dir, name + ".key");
            File.WriteAllText(certPath, certificate.ExportCertificatePem());
            File.WriteAllText(keyPath, key.ExportPkcs8PrivateKeyPem());
            return (certPath, keyPath);
        }

        string caPath = Path.Combine(dir, "ca.pem");
        File.WriteAllText(caPath, ca.ExportCertificatePem());
        var server = Issue("server", "127.0.0.1", "1.3.6.1.5.5.7.3.1", loopback: true);
        // Not named after a user: etcd takes a client certificate's CN as the user when a call has no token.
        var client = Issue("client", "remotecache-manager", "1.3.6.1.5.5.7.3.2", loopback: false);
        return (caPath, server.Cert, server.Key, client.Cert, client.Key);
    }

    /// <summary>Sends the member a signal (STOP freezes it: a member that does not answer; CONT thaws it).</summary>
    public void Signal(string signal) => TestManager.Signal(_process.Id, signal);

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
        {
            Signal("CONT");
            _process.Kill();
        }
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
