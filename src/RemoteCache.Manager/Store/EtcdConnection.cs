using System;
using System.IO;
using System.Linq;
using System.Net.Http;
using System.Net.Security;
using System.Security.Cryptography.X509Certificates;
using dotnet_etcd;
using Grpc.Core;
using Grpc.Net.Client.Configuration;

namespace RemoteCache.Manager.Store;

/// <summary>
/// How the manager reaches etcd, with the options an etcd client takes (etcdctl's <c>--endpoints</c>, <c>--cacert</c>,
/// <c>--cert</c>, <c>--key</c>, <c>--user</c>): members, the CA its members' certificates are checked against (https
/// endpoints), a client certificate (members started with <c>--client-cert-auth</c>), a user whose password is read
/// from a file (members with auth enabled).
/// </summary>
/// <param name="Endpoints">The members, comma-separated URLs (http:// or https://).</param>
public sealed record EtcdConnection(string Endpoints)
{
    /// <summary>PEM: the CA that signed the members' certificates; null: the system's trust store.</summary>
    public string? CaFile { get; init; }

    /// <summary>PEM: this client's certificate (with <see cref="KeyFile"/>); null: none.</summary>
    public string? CertFile { get; init; }

    /// <summary>PEM: the private key of <see cref="CertFile"/>.</summary>
    public string? KeyFile { get; init; }

    /// <summary>The etcd user (auth enabled); null: no authentication.</summary>
    public string? User { get; init; }

    /// <summary>A file holding <see cref="User"/>'s password (its first line), readable by its owner only.</summary>
    public string? PasswordFile { get; init; }

    /// <summary>A client for these settings; its calls are bounded by the caller's deadlines.</summary>
    /// <exception cref="ArgumentException">The settings do not fit together, or a file cannot be read (the message says which).</exception>
    internal EtcdClient CreateClient()
    {
        if (string.IsNullOrWhiteSpace(Endpoints))
            throw new ArgumentException("no etcd endpoints given (--etcd-endpoints http://HOST:2379,…)");
        if ((CertFile is null) != (KeyFile is null))
            throw new ArgumentException("an etcd client certificate needs both --etcd-cert and --etcd-key");
        if ((User is null) != (PasswordFile is null))
            throw new ArgumentException("an etcd user needs both --etcd-user and --etcd-password-file");
        bool tls = Endpoints.Split(',').All(e => e.Trim().StartsWith("https://", StringComparison.OrdinalIgnoreCase));
        if ((CaFile is not null || CertFile is not null) && !tls)
            throw new ArgumentException($"--etcd-ca and --etcd-cert are for https:// endpoints; these are not all https: {Endpoints}");
        X509Certificate2? ca = CaFile is null ? null : Read(CaFile, f => X509Certificate2.CreateFromPem(File.ReadAllText(f)));
        X509Certificate2? certificate = CertFile is null ? null : Read(CertFile, f => X509Certificate2.CreateFromPemFile(f, KeyFile));
        string? password = PasswordFile is null ? null : Read(PasswordFile, ReadPassword);

        void ConfigureChannel(Grpc.Net.Client.GrpcChannelOptions options)
        {
            // A dead member is noticed within seconds, not at the 30 s default ping (calls to it would wait until then).
            if (options.HttpHandler is SocketsHttpHandler handler)
            {
                handler.KeepAlivePingDelay = TimeSpan.FromSeconds(1);
                handler.KeepAlivePingTimeout = TimeSpan.FromSeconds(1);
                handler.ConnectTimeout = EtcdManagerStore.CallTimeout;
            }
            // A call that finds its member gone is tried again on another within a fraction of a second. The library's
            // own policy waits 1-5 s between attempts and stops retrying once a few calls have failed (its throttling):
            // with a member killed under load, the calls that happened to pick it failed for seconds, a leader's
            // takeover among them, and a cluster with a quorum served no one (the long bed run, session 15).
            options.ServiceConfig = new ServiceConfig
            {
                MethodConfigs =
                {
                    new MethodConfig
                    {
                        Names = { MethodName.Default },
                        RetryPolicy = new RetryPolicy
                        {
                            MaxAttempts = 5, InitialBackoff = TimeSpan.FromMilliseconds(50), MaxBackoff = TimeSpan.FromMilliseconds(500),
                            BackoffMultiplier = 2, RetryableStatusCodes = { StatusCode.Unavailable },
                        },
                    },
                },
                LoadBalancingConfigs = { new RoundRobinConfig() },
            };
        }

        var client = tls
            ? new EtcdClient(Endpoints, ssl =>
            {
                if (certificate is not null)
                    ssl.ClientCertificates = new X509CertificateCollection { certificate };
                if (ca is not null)
                    ssl.RemoteCertificateValidationCallback = (_, presented, _, errors) => TrustedBy(ca, presented, errors);
            }, configureChannelOptions: ConfigureChannel)
            : new EtcdClient(Endpoints, configureChannelOptions: ConfigureChannel);
        if (User is not null)
            client.SetCredentials(User, password!);
        return client;
    }

    // The member's certificate chains to `ca` alone (the system's roots play no part), and names the host it was asked for.
    private static bool TrustedBy(X509Certificate2 ca, X509Certificate? presented, SslPolicyErrors errors)
    {
        if (presented is null || (errors & (SslPolicyErrors.RemoteCertificateNotAvailable | SslPolicyErrors.RemoteCertificateNameMismatch)) != 0)
            return false;
        using var chain = new X509Chain();
        chain.ChainPolicy.TrustMode = X509ChainTrustMode.CustomRootTrust;
        chain.ChainPolicy.CustomTrustStore.Add(ca);
        chain.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
        using var leaf = new X509Certificate2(presented);
        return chain.Build(leaf);
    }

    private static string ReadPassword(string path)
    {
        if ((File.GetUnixFileMode(path) & (UnixFileMode.GroupRead | UnixFileMode.OtherRead)) != 0)
            throw new IOException($"the etcd password file {path} is readable by others: chmod 600 it");
        return File.ReadLines(path).FirstOrDefault() ?? "";
    }

    private static T Read<T>(string path, Func<string, T> read)
    {
        try
        {
            return read(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or System.Security.Cryptography.CryptographicException or ArgumentException)
        {
            throw new ArgumentException($"{path}: {e.Message}", e);
        }
    }
}
