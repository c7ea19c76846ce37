using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading.Tasks;
using Etcdserverpb;
using Google.Protobuf;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>One etcd member of an <see cref="EtcdCluster"/>, in its own host.</summary>
public sealed class EtcdMember
{
    internal EtcdMember(string name, BedHost host, string dataDir)
    {
        Name = name;
        Host = host;
        DataDir = dataDir;
    }

    public string Name { get; }

    public BedHost Host { get; }

    public string DataDir { get; }

    public string ClientUrl => $"http://{Host.Address}:2379";

    public string PeerUrl => $"http://{Host.Address}:2380";

    /// <summary>The running etcd, or null after <see cref="EtcdCluster.KillAsync"/>.</summary>
    public BedProcess? Process { get; internal set; }

    public bool Running => Process is { HasExited: false };
}

/// <summary>
/// A static etcd cluster (Debian's etcd 3.4: <c>--initial-cluster</c>, <c>--pre-vote=true</c>), one member per host
/// (etcd1, etcd2, …), data directories in the bed's directory so that a killed member restarts on its own data.
/// </summary>
public sealed class EtcdCluster
{
    public const string Binary = "/usr/bin/etcd";
    private readonly Bed _bed;

    private EtcdCluster(Bed bed, IReadOnlyList<EtcdMember> members)
    {
        _bed = bed;
        Members = members;
    }

    public IReadOnlyList<EtcdMember> Members { get; }

    /// <summary>Every member's client URL, comma-separated (what <c>--etcd-endpoints</c> takes).</summary>
    public string Endpoints => string.Join(',', Members.Select(m => m.ClientUrl));

    public EtcdConnection Connection => new(Endpoints);

    /// <summary>Adds <paramref name="count"/> hosts etcd1…etcdN, starts a member in each, and waits until the cluster takes a write.</summary>
    public static async Task<EtcdCluster> StartAsync(Bed bed, int count = 3)
    {
        var members = new List<EtcdMember>();
        for (int i = 1; i <= count; i++)
        {
            var host = await bed.AddHostAsync($"etcd{i}").ConfigureAwait(false);
            members.Add(new EtcdMember($"etcd{i}", host, Path.Combine(bed.Directory, $"etcd{i}.data")));
        }
        var cluster = new EtcdCluster(bed, members);
        foreach (var m in members)
            cluster.Launch(m);
        await cluster.WaitQuorumAsync(TimeSpan.FromSeconds(30)).ConfigureAwait(false);
        return cluster;
    }

    // The same command line at the first start and at a restart: with a data directory that holds a member, etcd takes
    // the cluster from its WAL and ignores the --initial-* flags.
    private void Launch(EtcdMember m)
    {
        string initial = string.Join(',', Members.Select(x => $"{x.Name}={x.PeerUrl}"));
        m.Process = m.Host.Start("etcd", Binary, new[]
        {
            "--name", m.Name, "--data-dir", m.DataDir,
            "--listen-client-urls", m.ClientUrl, "--advertise-client-urls", m.ClientUrl,
            "--listen-peer-urls", m.PeerUrl, "--initial-advertise-peer-urls", m.PeerUrl,
            "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", _bed.RunId,
            // Without pre-vote a member that comes back forces an election that stalls writes for seconds (FACTS.md).
            "--pre-vote=true",
        });
    }

    /// <summary>kill -9 of a member (its data directory stays).</summary>
    public async Task KillAsync(EtcdMember member)
    {
        if (member.Process is { } p)
            await p.KillAsync().ConfigureAwait(false);
    }

    /// <summary>Starts a killed member again on its data directory and waits until a write through it succeeds.</summary>
    public async Task RestartAsync(EtcdMember member, TimeSpan? timeout = null)
    {
        if (member.Running)
            throw new InvalidOperationException($"{member.Name} is running");
        Launch(member);
        await WaitWritableAsync(member, timeout ?? TimeSpan.FromSeconds(20)).ConfigureAwait(false);
    }

    /// <summary>Waits until a write through every running member succeeds (a write needs a quorum and a leader).</summary>
    public async Task WaitQuorumAsync(TimeSpan timeout)
    {
        foreach (var m in Members.Where(m => m.Running))
            await WaitWritableAsync(m, timeout).ConfigureAwait(false);
    }

    /// <summary>Waits until a write through <paramref name="member"/> succeeds.</summary>
    public async Task WaitWritableAsync(EtcdMember member, TimeSpan timeout)
    {
        var waited = Stopwatch.StartNew();
        Exception? last = null;
        using var client = new EtcdConnection(member.ClientUrl).CreateClient();
        while (waited.Elapsed < timeout)
        {
            if (member.Process is not { HasExited: false } p)
                throw new InvalidOperationException($"etcd member {member.Name} is not running:\n{member.Process?.Tail()}");
            try
            {
                await client.PutAsync(new PutRequest { Key = ByteString.CopyFromUtf8("/bed/probe"), Value = ByteString.CopyFromUtf8(member.Name) },
                                      null, DateTime.UtcNow.AddSeconds(2)).ConfigureAwait(false);
                return;
            }
            // dotnet-etcd reports a passed deadline as an RpcException or, from inside its retries, as a cancellation.
            catch (Exception e) when (e is Grpc.Core.RpcException or System.Net.Http.HttpRequestException or OperationCanceledException)
            {
                last = e;
                await Task.Delay(100).ConfigureAwait(false);
            }
        }
        throw new TimeoutException($"no write through etcd member {member.Name} within {timeout.TotalSeconds} s ({last?.Message}):\n{member.Process?.Tail()}");
    }

    /// <summary>The member that is the raft leader now, as a running member reports it; null when none knows one.</summary>
    public async Task<EtcdMember?> LeaderAsync()
    {
        foreach (var m in Members.Where(m => m.Running))
        {
            try
            {
                using var client = new EtcdConnection(m.ClientUrl).CreateClient();
                var status = await client.StatusAsync(new StatusRequest(), null, DateTime.UtcNow.AddSeconds(2)).ConfigureAwait(false);
                if (status.Leader == 0)
                    continue;
                var list = await client.MemberListAsync(new MemberListRequest(), null, DateTime.UtcNow.AddSeconds(2)).ConfigureAwait(false);
                string? name = list.Members.FirstOrDefault(x => x.ID == status.Leader)?.Name;
                return Members.FirstOrDefault(x => x.Name == name);
            }
            catch (Exception e) when (e is Grpc.Core.RpcException or System.Net.Http.HttpRequestException or OperationCanceledException)
            {
                // This member cannot tell; ask the next.
            }
        }
        return null;
    }
}
