using System;
using System.Collections.Generic;
using System.IO;
using System.Reflection;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>
/// The functions of <c>remotecache.h</c>, one-to-one. Hot-path functions take raw session pointers
/// (obtained once from a <see cref="SessionHandle"/> that the caller keeps alive) so that a read or a
/// write costs one blittable call: no marshalling, no allocation, no reverse P/Invoke.
/// </summary>
internal static unsafe partial class NativeMethods
{
    /// <summary>The native library's name as the loader sees it.</summary>
    public const string Library = "remotecache";

    /// <summary>The <c>RC_API_VERSION</c> this assembly's bindings were written against.</summary>
    public const uint ApiVersion = NativeLimits.ApiVersion;

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
        foreach (var dir in NativeDirectories(assembly))
        {
            var candidate = Path.Combine(dir, "libremotecache.so");
            if (File.Exists(candidate) && NativeLibrary.TryLoad(candidate, out var lib))
            {
                LoadedFrom = candidate;
                return lib;
            }
        }
        return IntPtr.Zero;  // fall back to the default probing (LD_LIBRARY_PATH, app directory)
    }

    // The NuGet runtime layout under the application and under this assembly's directory, for this machine's runtime
    // identifier and for the portable one the package ships.
    private static IEnumerable<string> NativeDirectories(Assembly assembly)
    {
        foreach (var root in new[] { AppContext.BaseDirectory, Path.GetDirectoryName(assembly.Location) ?? "" })
        {
            if (root.Length == 0)
                continue;
            yield return Path.Combine(root, "runtimes", RuntimeInformation.RuntimeIdentifier, "native");
            yield return Path.Combine(root, "runtimes", "linux-x64", "native");
            yield return root;
        }
    }

    /// <summary>The file the native library was loaded from, when this resolver loaded it.</summary>
    public static string? LoadedFrom { get; private set; }

    /// <summary>
    /// The directory holding the native library and the executables shipped next to it (remotecache-server,
    /// remotecache-capability): the first of the runtime-layout directories that has the server.
    /// </summary>
    public static string NativeDirectory
    {
        get
        {
            foreach (var dir in NativeDirectories(typeof(NativeMethods).Assembly))
                if (File.Exists(Path.Combine(dir, "remotecache-server")))
                    return dir;
            return Path.Combine(AppContext.BaseDirectory, "runtimes", "linux-x64", "native");
        }
    }

    private static readonly Lazy<string?> s_versionMismatch = new(CheckVersion);

    /// <summary>
    /// Throws when the native library that loads is not the one these bindings were written for (a stale
    /// libremotecache.so on the library path, a package mix-up): every entry point of the public API calls this first.
    /// </summary>
    /// <exception cref="InvalidOperationException">The library's <c>rc_api_version</c> differs, or it has none.</exception>
    public static void EnsureCompatible()
    {
        if (s_versionMismatch.Value is { } message)
            throw new InvalidOperationException(message);
    }

    private static string? CheckVersion()
    {
        uint loaded;
        try
        {
            loaded = ApiVersionOfLibrary();
        }
        catch (EntryPointNotFoundException)
        {
            return $"the native RemoteCache library{Where()} has no rc_api_version: it is older than API version 3, " +
                   $"and this RemoteCache assembly needs version {ApiVersion}";
        }
        return loaded == ApiVersion
            ? null
            : $"the native RemoteCache library{Where()} has API version {loaded}; this RemoteCache assembly needs version " +
              $"{ApiVersion} (the library and the assembly come from different builds or packages)";
    }

    private static string Where() => LoadedFrom is { } path ? $" loaded from {path}" : " found on the library path";

    /// <summary><c>rc_api_version</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_api_version")]
    private static partial uint ApiVersionOfLibrary();

    /// <summary><c>rc_get_object_counts</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_get_object_counts")]
    public static partial RemoteCacheStatus GetObjectCounts(out RcObjectCounts counts);

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
    public static partial RemoteCacheStatus CacheOpen(IntPtr* endpoints, nuint endpointCount, RcCacheOptions* options, out CacheHandle cache);

    /// <summary><c>rc_cache_capacity</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_capacity")]
    public static partial ulong CacheCapacity(CacheHandle cache);

    /// <summary><c>rc_cache_get_config</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_get_config")]
    public static partial RemoteCacheStatus CacheGetConfig(CacheHandle cache, out RcConfig config);

    /// <summary><c>rc_cache_reconfigure</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_reconfigure")]
    public static partial RemoteCacheStatus CacheReconfigure(CacheHandle cache, in RcConfig config);

    /// <summary><c>rc_cache_renew</c>: one capability text per endpoint.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_renew")]
    public static partial RemoteCacheStatus CacheRenew(CacheHandle cache, IntPtr* capabilities);

    /// <summary><c>rc_cache_grow</c>: endpoints and, when the cache has them, one capability text per endpoint (else null).</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_grow")]
    public static partial RemoteCacheStatus CacheGrow(CacheHandle cache, IntPtr* endpoints, nuint endpointCount, IntPtr* capabilities);

    /// <summary><c>rc_cache_shrink</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_shrink")]
    public static partial RemoteCacheStatus CacheShrink(CacheHandle cache, nuint serverCount);

    /// <summary><c>rc_cache_server_count</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_server_count")]
    public static partial nuint CacheServerCount(CacheHandle cache);

    /// <summary><c>rc_cache_region_count</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_region_count")]
    public static partial nuint CacheRegionCount(CacheHandle cache);

    /// <summary><c>rc_cache_region_info</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_region_info")]
    public static partial RemoteCacheStatus CacheRegionInfo(CacheHandle cache, uint region, out RcRegionInfo info);

    /// <summary><c>rc_cache_holder_count</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_holder_count")]
    public static partial nuint CacheHolderCount(CacheHandle cache);

    /// <summary><c>rc_cache_holder_endpoint</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_holder_endpoint")]
    public static partial RemoteCacheStatus CacheHolderEndpoint(CacheHandle cache, uint holder, byte* text, nuint capacity);

    /// <summary><c>rc_cache_holder_status</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_holder_status")]
    public static partial RemoteCacheStatus CacheHolderStatus(CacheHandle cache, uint holder);

    /// <summary><c>rc_cache_add_holder</c>: capability null when the cache has none.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_add_holder", StringMarshalling = StringMarshalling.Utf8)]
    public static partial RemoteCacheStatus CacheAddHolder(CacheHandle cache, string endpoint, string? capability, uint regions,
                                                           out uint holder);

    /// <summary><c>rc_cache_migration_begin</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_migration_begin")]
    public static partial RemoteCacheStatus CacheMigrationBegin(CacheHandle cache, uint region, uint count, uint flags, uint timeoutMs);

    /// <summary><c>rc_cache_migration_commit</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_migration_commit")]
    public static partial RemoteCacheStatus CacheMigrationCommit(CacheHandle cache, uint region, uint holder, uint holderRegion);

    /// <summary><c>rc_cache_map_region_ahead</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_map_region_ahead")]
    public static partial RemoteCacheStatus CacheMapRegionAhead(CacheHandle cache, uint holder, uint holderRegion);

    /// <summary><c>rc_cache_migration_abort</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_migration_abort")]
    public static partial RemoteCacheStatus CacheMigrationAbort(CacheHandle cache, uint region);

    /// <summary><c>rc_cache_remove_holder</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_remove_holder")]
    public static partial RemoteCacheStatus CacheRemoveHolder(CacheHandle cache, uint holder);

    /// <summary><c>rc_cache_close</c> (use <see cref="CacheHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_cache_close")]
    public static partial RemoteCacheStatus CacheClose(IntPtr cache);

    /// <summary><c>rc_session_open</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_open")]
    public static partial RemoteCacheStatus SessionOpen(CacheHandle cache, out SessionHandle session);

    /// <summary><c>rc_read</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_read")]
    public static partial RemoteCacheStatus Read(IntPtr session, ulong address, void* destination, ulong length, ulong tag);

    /// <summary><c>rc_write</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_write")]
    public static partial RemoteCacheStatus Write(IntPtr session, ulong address, void* source, ulong length, ulong tag);

    /// <summary><c>rc_flush</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_flush")]
    public static partial RemoteCacheStatus Flush(IntPtr session);

    /// <summary><c>rc_poll</c>: completions copied, or a negative <see cref="RemoteCacheStatus"/>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_poll")]
    public static partial int Poll(IntPtr session, RemoteCacheCompletion* completions, uint max);

    /// <summary><c>rc_wait</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_wait")]
    public static partial int Wait(IntPtr session, RemoteCacheCompletion* completions, uint max, int timeoutMs);

    /// <summary><c>rc_wake</c>: the one session call allowed from any thread.</summary>
    [LibraryImport(Library, EntryPoint = "rc_wake")]
    public static partial RemoteCacheStatus Wake(IntPtr session);

    /// <summary><c>rc_session_outstanding</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_outstanding")]
    public static partial uint SessionOutstanding(IntPtr session);

    /// <summary><c>rc_session_close</c> (use <see cref="SessionHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_session_close")]
    public static partial RemoteCacheStatus SessionClose(IntPtr session);

    /// <summary><c>rc_capability_mint</c>: writes a NUL-terminated capability text of at most <paramref name="outCapacity"/> bytes.</summary>
    [LibraryImport(Library, EntryPoint = "rc_capability_mint")]
    public static partial RemoteCacheStatus CapabilityMint(byte* key, nuint keyLength, ulong cacheId, byte* serverId, uint regions,
                                                  ulong expiresUnixMs, byte* outText, nuint outCapacity);

    /// <summary><c>rc_capability_mint_migration</c>: as <see cref="CapabilityMint"/>, for a server pulling a region.</summary>
    [LibraryImport(Library, EntryPoint = "rc_capability_mint_migration")]
    public static partial RemoteCacheStatus CapabilityMintMigration(byte* key, nuint keyLength, ulong cacheId, byte* serverId,
                                                           ulong expiresUnixMs, byte* outText, nuint outCapacity);

    /// <summary><c>rc_server_start</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_start")]
    public static partial RemoteCacheStatus ServerStart(RcServerOptions* options, out ServerHandle server);

    /// <summary><c>rc_server_id</c>: the identity capabilities for this server must name.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_id")]
    public static partial IntPtr ServerId(ServerHandle server);

    /// <summary><c>rc_server_endpoint</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_endpoint")]
    public static partial IntPtr ServerEndpoint(ServerHandle server, nuint index);

    /// <summary><c>rc_server_memory_in_use</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_memory_in_use")]
    public static partial ulong ServerMemoryInUse(ServerHandle server);

    /// <summary><c>rc_server_memory_committed</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_memory_committed")]
    public static partial ulong ServerMemoryCommitted(ServerHandle server);

    /// <summary><c>rc_server_memory_limit</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_memory_limit")]
    public static partial ulong ServerMemoryLimit(ServerHandle server);

    /// <summary><c>rc_server_set_memory_limit</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_set_memory_limit")]
    public static partial RemoteCacheStatus ServerSetMemoryLimit(ServerHandle server, ulong bytes);

    /// <summary><c>rc_server_drop_cache</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_drop_cache")]
    public static partial RemoteCacheStatus ServerDropCache(ServerHandle server, ulong cacheId, out nuint dropped);

    /// <summary><c>rc_server_stop</c> (use <see cref="ServerHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_server_stop")]
    public static partial RemoteCacheStatus ServerStop(IntPtr server);
}
