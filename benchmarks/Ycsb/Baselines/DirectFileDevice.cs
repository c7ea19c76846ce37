using System;
using System.Collections.Concurrent;
using System.IO;
using System.Runtime.InteropServices;
using Microsoft.Win32.SafeHandles;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// The SSD baseline: one file per segment opened with O_DIRECT, so reads come from the disk and not the page
/// cache. FASTER's own Linux device (Devices.CreateLogDevice → ManagedLocalStorageDevice) asks FileStream for
/// "no buffering", which .NET on Linux does not turn into O_DIRECT (the benchmark prints the open flags), so its
/// reads would be served from the page cache; this device is that device with the flag really set.
/// </summary>
public sealed partial class DirectFileDevice : BlockingIoDevice
{
    private const int O_RDWR = 2, O_CREAT = 0x40, O_DIRECT = 0x4000, O_CLOEXEC = 0x80000;
    private readonly ConcurrentDictionary<int, Lazy<SafeFileHandle>> _files = new();
    private readonly string _path;

    public DirectFileDevice(string path, int workers = 8, uint sectorSize = 512) : base($"direct:{path}", workers, sectorSize)
    {
        _path = path;
        Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
        StartWorkers();
    }

    [LibraryImport("libc", EntryPoint = "open", StringMarshalling = StringMarshalling.Utf8, SetLastError = true)]
    private static partial int Open(string path, int flags, int mode);

    /// <summary>
    /// The segment's file, opened once: the workers race for a segment's first I/O, and GetOrAdd's factory alone would
    /// open it in each of them, leaving all handles but one to the finalizer, with concurrent O_CREAT opens of one new
    /// file on the server when the log is on a file share. A failed open is retried by the next I/O.
    /// </summary>
    private SafeFileHandle File(int segment)
    {
        var file = _files.GetOrAdd(segment, s => new Lazy<SafeFileHandle>(() => OpenSegment(s)));
        try
        {
            return file.Value;
        }
        catch (IOException)
        {
            _files.TryRemove(new(segment, file));
            throw;
        }
    }

    private SafeFileHandle OpenSegment(int segment)
    {
        int fd = Open($"{_path}.{segment}", O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0x1a4 /* 0644 */);
        if (fd < 0)
            throw new IOException($"open({_path}.{segment}, O_DIRECT) failed: errno {Marshal.GetLastPInvokeError()}");
        return new SafeFileHandle(fd, ownsHandle: true);
    }

    protected override unsafe uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length) =>
        (uint)RandomAccess.Read(File(segment), new Span<byte>((void*)destination, (int)length), (long)offset);

    protected override unsafe uint Write(int worker, int segment, ulong offset, IntPtr source, uint length)
    {
        RandomAccess.Write(File(segment), new ReadOnlySpan<byte>((void*)source, (int)length), (long)offset);
        return length;
    }

    protected override void DisposeStorage()
    {
        foreach (var f in _files.Values)
            if (f.IsValueCreated)
                f.Value.Dispose();
    }
}
