using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// The SMB baseline: the log's segments are files on an SMB share, reached through Samba's client library
/// (libsmbclient, Debian package libsmbclient) — the file-server alternative to remote memory. Each worker has its
/// own SMB connection (an SMBCCTX) and file handles, since a libsmbclient context is not thread-safe.
/// </summary>
public sealed unsafe partial class SmbFileDevice : BlockingIoDevice
{
    private const string Lib = "libsmbclient.so.0";
    private const int O_RDWR = 2, O_CREAT = 0x40, SEEK_SET = 0;

    // The auth callback has no user pointer in this signature; the credentials are process-wide.
    private static string s_user = "", s_password = "";

    private readonly string _url;   // smb://host:port/share/name
    private readonly Worker[] _workers;

    /// <param name="url">The share and file name prefix: segment s is "{url}.{s}".</param>
    public SmbFileDevice(string url, string user, string password)
        : base($"smb:{url}", workers: 1)
    {
        _url = url;
        s_user = user;
        s_password = password;
        _workers = new[] { new Worker() };
        StartWorkers();
    }

    private static IntPtr NewContext()
    {
        var ctx = smbc_new_context();
        if (ctx == IntPtr.Zero)
            throw new InvalidOperationException("smbc_new_context failed");
        smbc_setFunctionAuthData(ctx, &Auth);
        smbc_setOptionNoAutoAnonymousLogin(ctx, 1);
        if (smbc_init_context(ctx) == IntPtr.Zero)
            throw new InvalidOperationException($"smbc_init_context failed: errno {Marshal.GetLastPInvokeError()}");
        return ctx;
    }

    [UnmanagedCallersOnly(CallConvs = new[] { typeof(CallConvCdecl) })]
    private static void Auth(byte* server, byte* share, byte* workgroup, int workgroupLength, byte* user, int userLength,
                             byte* password, int passwordLength)
    {
        Copy("WORKGROUP", workgroup, workgroupLength);
        Copy(s_user, user, userLength);
        Copy(s_password, password, passwordLength);
    }

    private static void Copy(string value, byte* destination, int capacity)
    {
        var bytes = Encoding.UTF8.GetBytes(value);
        int n = Math.Min(bytes.Length, capacity - 1);
        for (int i = 0; i < n; i++)
            destination[i] = bytes[i];
        destination[n] = 0;
    }

    private IntPtr File(int worker, int segment)
    {
        var w = _workers[worker];
        if (w.Files.TryGetValue(segment, out var file))
            return file;
        if (w.Context == IntPtr.Zero)
            w.Context = NewContext();  // on the worker's own thread, where it is used
        var open = smbc_getFunctionOpen(w.Context);
        var path = Encoding.UTF8.GetBytes($"{_url}.{segment}\0");
        fixed (byte* p = path)
            file = open(w.Context, p, O_RDWR | O_CREAT, 0x1a4);
        if (file == IntPtr.Zero)
            throw new System.IO.IOException($"smbc open {_url}.{segment} failed: errno {Marshal.GetLastSystemError()}");
        w.Files[segment] = file;
        return file;
    }

    private void Seek(int worker, IntPtr file, ulong offset)
    {
        var ctx = _workers[worker].Context;
        if (smbc_getFunctionLseek(ctx)(ctx, file, (long)offset, SEEK_SET) != (long)offset)
            throw new System.IO.IOException($"smbc lseek to {offset} failed: errno {Marshal.GetLastSystemError()}");
    }

    protected override uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length)
    {
        var file = File(worker, segment);
        Seek(worker, file, offset);
        var ctx = _workers[worker].Context;
        var read = smbc_getFunctionRead(ctx);
        uint done = 0;
        while (done < length)
        {
            nint n = read(ctx, file, (byte*)destination + done, length - done);
            if (n < 0)
                throw new System.IO.IOException($"smbc read failed: errno {Marshal.GetLastSystemError()}");
            if (n == 0)
                break;  // end of file: like a local segment file, return what there is
            done += (uint)n;
        }
        return done;
    }

    protected override uint Write(int worker, int segment, ulong offset, IntPtr source, uint length)
    {
        var file = File(worker, segment);
        Seek(worker, file, offset);
        var ctx = _workers[worker].Context;
        var write = smbc_getFunctionWrite(ctx);
        uint done = 0;
        while (done < length)
        {
            nint n = write(ctx, file, (byte*)source + done, length - done);
            if (n <= 0)
                throw new System.IO.IOException($"smbc write failed: errno {Marshal.GetLastSystemError()}");
            done += (uint)n;
        }
        return done;
    }

    protected override void CloseWorker(int worker)
    {
        var w = _workers[worker];
        if (w.Context == IntPtr.Zero)
            return;
        var close = smbc_getFunctionClose(w.Context);
        foreach (var file in w.Files.Values)
            close(w.Context, file);
        w.Files.Clear();
        smbc_free_context(w.Context, 1);
    }

    private sealed class Worker
    {
        public IntPtr Context;
        public readonly Dictionary<int, IntPtr> Files = new();
    }

    [LibraryImport(Lib)] private static partial IntPtr smbc_new_context();
    [LibraryImport(Lib, SetLastError = true)] private static partial IntPtr smbc_init_context(IntPtr ctx);
    [LibraryImport(Lib)] private static partial int smbc_free_context(IntPtr ctx, int shutdown);
    [LibraryImport(Lib)] private static partial void smbc_setOptionNoAutoAnonymousLogin(IntPtr ctx, int value);
    [LibraryImport(Lib)]
    private static partial void smbc_setFunctionAuthData(
        IntPtr ctx, delegate* unmanaged[Cdecl]<byte*, byte*, byte*, int, byte*, int, byte*, int, void> fn);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, byte*, int, int, IntPtr> smbc_getFunctionOpen(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, void*, nuint, nint> smbc_getFunctionRead(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, void*, nuint, nint> smbc_getFunctionWrite(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, long, int, long> smbc_getFunctionLseek(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, int> smbc_getFunctionClose(IntPtr ctx);
}
