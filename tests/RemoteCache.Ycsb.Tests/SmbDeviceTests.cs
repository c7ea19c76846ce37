using System;
using System.IO;
using System.Threading;
using RemoteCache.Benchmarks.Ycsb.Baselines;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>The SMB baseline device against a real smbd: requests in flight through worker processes, and a dead worker.</summary>
public sealed class SmbDeviceTests
{
    [Fact]
    public void WritesAndReadsBackThroughSeveralWorkersAndReportsADeadOne()
    {
        string root = Path.Combine(Path.GetTempPath(), $"smb-device-{Guid.NewGuid():N}");
        try
        {
            using var samba = SambaServer.Start(root);
            using var device = new SmbFileDevice($"{samba.ShareUrl}/t", SambaServer.User, samba.Password, workers: 3);
            device.Initialize(1L << 20);
            const int Ops = 24, Bytes = 4096;
            var buffers = new byte[Ops][];
            for (int i = 0; i < Ops; i++)
            {
                buffers[i] = new byte[Bytes];
                new Random(i).NextBytes(buffers[i]);
            }
            // All writes submitted at once: three workers serve them concurrently, each over its own connection.
            Run(device, Ops, i => (true, buffers[i]));
            var back = new byte[Ops][];
            Run(device, Ops, i => (false, back[i] = new byte[Bytes]));
            for (int i = 0; i < Ops; i++)
                Assert.Equal(buffers[i], back[i]);
            Assert.Equal(Bytes * (Ops / 3), new FileInfo(Path.Combine(samba.ShareDirectory, "t.1")).Length);

            // A worker process that dies fails its requests with an error code; FASTER is not left waiting.
            foreach (var p in System.Diagnostics.Process.GetProcesses())
            {
                try
                {
                    string command = File.ReadAllText($"/proc/{p.Id}/cmdline");  // only this test's workers: its share's URL
                    if (command.Contains(SmbWorker.Flag) && command.Contains(samba.ShareUrl + "/t"))
                        p.Kill();
                }
                catch (Exception e) when (e is IOException or UnauthorizedAccessException or InvalidOperationException)
                {
                }
            }
            var errors = Run(device, 6, i => (false, new byte[Bytes]));
            Assert.True(errors > 0, "reads after every worker process was killed all succeeded");
        }
        finally
        {
            if (Directory.Exists(root))
                Directory.Delete(root, recursive: true);
        }
    }

    // Segment i % 3, offset (i / 3) * length; waits for every completion; returns how many failed.
    private static int Run(SmbFileDevice device, int ops, Func<int, (bool Write, byte[] Buffer)> op)
    {
        int errors = 0;
        using var done = new CountdownEvent(ops);
        var pins = new System.Runtime.InteropServices.GCHandle[ops];
        for (int i = 0; i < ops; i++)
        {
            var (write, buffer) = op(i);
            pins[i] = System.Runtime.InteropServices.GCHandle.Alloc(buffer, System.Runtime.InteropServices.GCHandleType.Pinned);
            var address = pins[i].AddrOfPinnedObject();
            ulong offset = (ulong)(i / 3 * buffer.Length);
            FASTER.core.DeviceIOCompletionCallback callback = (error, _, _) =>
            {
                if (error != 0)
                    Interlocked.Increment(ref errors);
                done.Signal();
            };
            if (write)
                device.WriteAsync(address, i % 3, offset, (uint)buffer.Length, callback, null!);
            else
                device.ReadAsync(i % 3, offset, address, (uint)buffer.Length, callback, null!);
        }
        Assert.True(done.Wait(TimeSpan.FromSeconds(60)), "SMB device requests did not complete within 60 s");
        foreach (var pin in pins)
            pin.Free();
        return errors;
    }
}
