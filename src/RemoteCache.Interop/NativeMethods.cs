using System;
using System.IO;
using System.Reflection;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>
/// The functions of <c>remotecache.h</c>, one-to-one. Hot-path functions take raw session pointers
/// (obtained once from a <see cref="SessionHandle"/> that the caller keeps alive) so that a read or a
/// write costs one blittable call: no marshalling, no allocation, no reverse P/Invoke.
/// </summary>
public static unsafe partial class NativeMethods
{
    /// <summary>The native library's name as the loader sees it.</summary>
    public const string Library = "remotecache";

    // An explicit static constructor runs before the first call of any method of this class, so the
    // resolver is in place before the first P/Invoke.
    static NativeMethods() => NativeLibrary.SetDllImportResolver(typeof(NativeMethods).Assembly, Resolve);

    /// <summary>
    /// Finds <c>libremotecache.so</c> in the NuGet runtime layout next to the application
    /// (<c>runtimes/linux-x64/native</c>), which project references do not put on the probing path.
    /// </summary>
    private static IntPtr Resolve(string name, Assembly assembly, DllImportSearchPath? path)
    {
        if (name != Library)
            return IntPtr.Zero;
        foreach (var dir in new[] { AppContext.BaseDirectory, Path.GetDirectoryName(assembly.Location) ?? "" })
        {
            var candidate = Path.Combine(dir, "runtimes", RuntimeInformation.RuntimeIdentifier, "native", "libremotecache.so");
            if (!File.Exists(candidate))
                candidate = Path.Combine(dir, "runtimes", "linux-x64", "native", "libremotecache.so");
            if (File.Exists(candidate) && NativeLibrary.TryLoad(candidate, out var lib))
                return lib;
        }
        return IntPtr.Zero;  // fall back to the default probing (LD_LIBRARY_PATH, app directory)
    }

    /// <summary>The directory holding the native library and the server executable next to it.</summary>
    public static string NativeDirectory =>
        Path.Combine(AppContext.BaseDirectory, "runtimes", "linux-x64", "native");

    /// <summary><c>rc_last_error</c>: text of the last error on the calling thread.</summary>
    [LibraryImport(Library, EntryPoint = "rc_last_error")]
    public static partial IntPtr LastErrorPtr();

    /// <summary>The last error text of the calling thread as a string.</summary>
    public static string LastError() => Marshal.PtrToStringUTF8(LastErrorPtr()) ?? "";

    /// <summary><c>rc_status_name</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_status_name")]
    public static partial IntPtr StatusNamePtr(int status);

    /// <summary><c>rc_cache_open</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_open")]
    public static partial RcStatus CacheOpen(IntPtr* endpoints, nuint endpointCount, RcCacheOptions* options, out CacheHandle cache);

    /// <summary><c>rc_cache_capacity</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_capacity")]
    public static partial ulong CacheCapacity(CacheHandle cache);

    /// <summary><c>rc_cache_get_config</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_get_config")]
    public static partial RcStatus CacheGetConfig(CacheHandle cache, out RcConfig config);

    /// <summary><c>rc_cache_reconfigure</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_reconfigure")]
    public static partial RcStatus CacheReconfigure(CacheHandle cache, in RcConfig config);

    /// <summary><c>rc_cache_renew</c>: one capability text per endpoint.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_renew")]
    public static partial RcStatus CacheRenew(CacheHandle cache, IntPtr* capabilities);

    /// <summary><c>rc_cache_close</c> (use <see cref="CacheHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_close")]
    public static partial RcStatus CacheClose(IntPtr cache);

    /// <summary><c>rc_session_open</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_open")]
    public static partial RcStatus SessionOpen(CacheHandle cache, out SessionHandle session);

    /// <summary><c>rc_read</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_read")]
    public static partial RcStatus Read(IntPtr session, ulong address, void* destination, ulong length, ulong tag);

    /// <summary><c>rc_write</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_write")]
    public static partial RcStatus Write(IntPtr session, ulong address, void* source, ulong length, ulong tag);

    /// <summary><c>rc_flush</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_flush")]
    public static partial RcStatus Flush(IntPtr session);

    /// <summary><c>rc_poll</c>: completions copied, or a negative <see cref="RcStatus"/>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_poll")]
    public static partial int Poll(IntPtr session, RcCompletion* completions, uint max);

    /// <summary><c>rc_wait</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_wait")]
    public static partial int Wait(IntPtr session, RcCompletion* completions, uint max, int timeoutMs);

    /// <summary><c>rc_wake</c>: the one session call allowed from any thread.</summary>
    [LibraryImport(Library, EntryPoint = "rc_wake")]
    public static partial RcStatus Wake(IntPtr session);

    /// <summary><c>rc_session_outstanding</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_outstanding")]
    public static partial uint SessionOutstanding(IntPtr session);

    /// <summary><c>rc_session_close</c> (use <see cref="SessionHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_close")]
    public static partial RcStatus SessionClose(IntPtr session);

    /// <summary><c>rc_capability_mint</c>: writes a NUL-terminated capability text of at most <paramref name="outCapacity"/> bytes.</summary>
    [LibraryImport(Library, EntryPoint = "rc_capability_mint")]
    public static partial RcStatus CapabilityMint(byte* key, nuint keyLength, ulong cacheId, byte* serverId, uint regions,
                                                  ulong expiresUnixMs, byte* outText, nuint outCapacity);

    /// <summary><c>rc_server_start</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_start")]
    public static partial RcStatus ServerStart(RcServerOptions* options, out ServerHandle server);

    /// <summary><c>rc_server_id</c>: the identity capabilities for this server must name.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_id")]
    public static partial IntPtr ServerId(ServerHandle server);

    /// <summary><c>rc_server_endpoint</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_endpoint")]
    public static partial IntPtr ServerEndpoint(ServerHandle server, nuint index);

    /// <summary><c>rc_server_memory_in_use</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_memory_in_use")]
    public static partial ulong ServerMemoryInUse(ServerHandle server);

    /// <summary><c>rc_server_stop</c> (use <see cref="ServerHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_stop")]
    public static partial RcStatus ServerStop(IntPtr server);
}
