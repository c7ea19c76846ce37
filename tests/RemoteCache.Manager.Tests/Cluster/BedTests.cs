using System;
using System.Linq;
using System.Threading.Tasks;
using RemoteCache.Admin;
using Xunit;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>The bed's own primitives: hosts reach each other and the test process, links cut and come back, processes freeze, nothing is left behind.</summary>
[Collection(ClusterCollection.Name)]
public sealed class BedTests
{
    [ClusterFact]
    public async Task HostsAreReachableCutFrozenAndRemovedAndNothingIsLeftBehind()
    {
        // A leftover of a crashed run: its pid (4194303, the highest there can be) is not alive, so the next bed removes
        // it; a name that only starts like the bed's is not the bed's, and stays.
        string leftover = Bed.NamePrefix + "2hwcf0", stranger = Bed.NamePrefix + "ridge0";
        await Ip.RunAsync("netns", "add", leftover + "-x");
        await Ip.RunAsync("link", "add", leftover + "br", "type", "bridge");
        await Ip.RunAsync("link", "add", stranger, "type", "bridge");
        string leftoverCgroup = System.IO.Path.Combine(Bed.MemoryCgroupRoot, leftover + "-x");
        System.IO.Directory.CreateDirectory(leftoverCgroup);

        string runId, ns;
        await using (var bed = await Bed.CreateAsync())
        {
            runId = bed.RunId;
            Assert.DoesNotContain(await Names(), n => n.StartsWith(leftover, StringComparison.Ordinal));
            Assert.False(System.IO.Directory.Exists(leftoverCgroup), "a crashed run's memory cgroup was left");
            bool strangerStayed = (await Names()).Contains(stranger);
            await Ip.RunAsync("link", "del", stranger);
            Assert.True(strangerStayed, $"{stranger} is not a bed's name, yet it was removed");
            var files = ManagerFiles.Create(bed);
            var server = await BedServer.StartAsync(bed, files, "srv1");
            var other = await bed.AddHostAsync("cli1", 256L << 20);
            ns = server.Host.Namespace;
            Assert.Equal(bed.Subnet + ".2", server.Host.Address.ToString());
            Assert.True(bed.RunId.Length + "v254".Length <= 15, "interface names fit in 15 characters");

            // From the root namespace (through the bridge) and from another host.
            Assert.Empty(await server.ListCachesAsync());
            Assert.Equal(0, await InHost(other, $"exec 3<>/dev/tcp/{server.Host.Address}/{BedServer.Port}"));

            // A host with a memory limit is a memory cgroup: its processes run in it, and see it at the usual path.
            Assert.Equal(0, await InHost(other, $"grep -qx $$ {other.MemoryCgroup}/cgroup.procs && test \"$(cat /sys/fs/cgroup/memory/{System.IO.Path.GetFileName(other.MemoryCgroup)}/memory.limit_in_bytes)\" = {256L << 20}"));
            Assert.Equal(256L << 20, other.CgroupValue("memory.limit_in_bytes"));
            Assert.Equal(0, other.OomKills);
            Assert.Null(server.Host.MemoryCgroup);

            // Cut from the namespace's side: silence (a timeout), not a refusal; restored, it answers again.
            await server.Host.CutLinkAsync();
            var cut = await Assert.ThrowsAsync<RemoteCacheException>(() => server.ListCachesAsync(TimeSpan.FromMilliseconds(500)));
            Assert.Equal(RemoteCacheStatus.Timeout, cut.Status);
            await server.Host.RestoreLinkAsync();
            Assert.Empty(await server.ListCachesAsync());

            // A selective cut: the other host's traffic to the server is dropped; the root namespace still reaches it.
            await other.BlockAsync(server.Host.Address);
            Assert.NotEqual(0, await InHost(other, $"exec 3<>/dev/tcp/{server.Host.Address}/{BedServer.Port}"));
            Assert.Empty(await server.ListCachesAsync());
            await other.UnblockAsync(server.Host.Address);
            Assert.Equal(0, await InHost(other, $"exec 3<>/dev/tcp/{server.Host.Address}/{BedServer.Port}"));

            // Frozen: the kernel still accepts the connection, the server never answers.
            await server.Process!.PauseAsync();
            await Assert.ThrowsAsync<RemoteCacheException>(() => server.ListCachesAsync(TimeSpan.FromMilliseconds(500)));
            await server.Process.ResumeAsync();
            Assert.Empty(await server.ListCachesAsync());

            // kill -9, restart on the same address.
            await server.Process.KillAsync();
            Assert.True(server.Process.HasExited);
            await server.StartAsync();
            Assert.Empty(await server.ListCachesAsync());

            // The whole host lost.
            await server.Host.RemoveAsync();
            Assert.Empty(await server.Host.PidsAsync());
            Assert.DoesNotContain(ns, await Names());
        }
        var after = await Names();
        Assert.DoesNotContain(after, n => n.StartsWith(runId, StringComparison.Ordinal));
        Assert.Empty(System.IO.Directory.GetDirectories(Bed.MemoryCgroupRoot, runId + "*"));
    }

    // Every namespace and root-namespace link name.
    private static async Task<string[]> Names()
    {
        var (_, namespaces) = await Ip.RunAsync("netns", "list");
        var (_, links) = await Ip.RunAsync("-o", "link", "show");
        return namespaces.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(' ')[0])
                         .Concat(links.Split('\n', StringSplitOptions.RemoveEmptyEntries).Select(l => l.Split(':', 3)).Where(p => p.Length == 3).Select(p => p[1].Trim().Split('@')[0]))
                         .ToArray();
    }

    private static async Task<int> InHost(BedHost host, string script)
    {
        var p = host.Start("probe", "/bin/bash", new[] { "-c", script });
        await p.Exited.WaitAsync(TimeSpan.FromSeconds(10));
        return p.ExitCode ?? -1;
    }
}
