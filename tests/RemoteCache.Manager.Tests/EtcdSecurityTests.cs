using System;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>An etcd member serving TLS that checks client certificates and has auth enabled.</summary>
public sealed class SecuredEtcdFixture : IAsyncLifetime
{
    public EtcdProcess Etcd { get; private set; } = null!;

    public async Task InitializeAsync() => Etcd = await EtcdProcess.StartAsync(tls: true, auth: true);

    public async Task DisposeAsync() => await Etcd.DisposeAsync();
}

/// <summary>The etcd store reaches a secured etcd the way etcd's own clients do, and is refused without what it asks for.</summary>
public sealed class EtcdSecurityTests : IClassFixture<SecuredEtcdFixture>
{
    private readonly EtcdProcess _etcd;
    private readonly string _prefix = $"/secure-{Guid.NewGuid():N}/";

    public EtcdSecurityTests(SecuredEtcdFixture fixture) => _etcd = fixture.Etcd;

    private Task<EtcdManagerStore> OpenAsync(EtcdConnection connection) => EtcdManagerStore.OpenAsync(connection, _prefix, CancellationToken.None);

    [Fact]
    public async Task WorksOverTlsWithAClientCertificateAndAUser()
    {
        Assert.StartsWith("https://", _etcd.Endpoint);
        await using var store = await OpenAsync(_etcd.Connection);
        var change = new StoreChange();
        change.PutCaches.Add(StoreContract.Cache(7, "a"));
        change.Events.Add((7, "a", seq => new byte[] { (byte)seq }));
        Assert.Equal(1, (await store.ApplyAsync(change, CancellationToken.None)).Single().Sequence);
        Assert.Equal(7UL, Assert.Single((await store.LoadAsync(CancellationToken.None)).Caches).CacheId);
        Assert.True(await store.PingAsync(CancellationToken.None));
    }

    [Fact]
    public async Task IsRefusedWithoutAClientCertificateOrWithAnotherCaOrAWrongPassword()
    {
        await Assert.ThrowsAsync<StoreUnavailableException>(() => OpenAsync(_etcd.Connection with { CertFile = null, KeyFile = null }));
        await Assert.ThrowsAsync<StoreUnavailableException>(() => OpenAsync(_etcd.Connection with { User = null, PasswordFile = null }));

        string wrong = Path.Combine(Path.GetDirectoryName(_etcd.RootPasswordFile)!, "wrong.password");
        await File.WriteAllTextAsync(wrong, "not-the-password\n");
        File.SetUnixFileMode(wrong, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await Assert.ThrowsAsync<StoreUnavailableException>(() => OpenAsync(_etcd.Connection with { PasswordFile = wrong }));

        // The member's certificate checked against a CA that did not sign it: the client certificate stands in for one.
        var e = await Assert.ThrowsAsync<StoreUnavailableException>(() => OpenAsync(_etcd.Connection with { CaFile = _etcd.ClientCertFile }));
        Assert.Contains(_etcd.Endpoint, e.Message);
    }

    [Fact]
    public async Task SettingsThatCannotWorkAreRefusedBeforeAnythingIsSent()
    {
        string open = Path.Combine(Path.GetDirectoryName(_etcd.RootPasswordFile)!, "open.password");
        await File.WriteAllTextAsync(open, EtcdProcess.RootPassword);
        File.SetUnixFileMode(open, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.OtherRead);
        var readable = await Assert.ThrowsAsync<ArgumentException>(() => OpenAsync(_etcd.Connection with { PasswordFile = open }));
        Assert.Contains("chmod 600", readable.Message);
        var half = await Assert.ThrowsAsync<ArgumentException>(() => OpenAsync(_etcd.Connection with { KeyFile = null }));
        Assert.Contains("--etcd-key", half.Message);
        var plain = await Assert.ThrowsAsync<ArgumentException>(() => OpenAsync(_etcd.Connection with { Endpoints = "http://127.0.0.1:9" }));
        Assert.Contains("https", plain.Message);
    }
}
