using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Text.RegularExpressions;
using Xunit;

namespace RemoteCache.Tests;

/// <summary>
/// remotecache.h and remotecache_admin.h as the C compiler lays them out, from <c>remotecache-abi</c> (a C program built
/// with the library that prints every struct's size and field offsets, the status codes and the numeric defines, and
/// checks that its own tables cover each struct).
/// </summary>
internal static partial class NativeAbi
{
    public sealed record Field(string Name, int Offset, int Size);

    public sealed record Struct(int Size, int Align, IReadOnlyList<Field> Fields);

    public sealed record Dump(int ApiVersion, IReadOnlyDictionary<string, Struct> Structs,
                              IReadOnlyDictionary<string, int> Statuses, IReadOnlyDictionary<string, long> Defines);

    private static readonly Lazy<Dump> s_dump = new(Run);

    public static Dump Get() => s_dump.Value;

    public static long Define(string name) => Get().Defines[name];

    public static string Tool => Path.Combine(Path.GetDirectoryName(RemoteCacheServer.ExecutablePath)!, "remotecache-abi");

    private static Dump Run()
    {
        var info = new ProcessStartInfo(Tool) { RedirectStandardOutput = true, RedirectStandardError = true };
        using var process = Process.Start(info)!;
        string output = process.StandardOutput.ReadToEnd();
        string error = process.StandardError.ReadToEnd();
        process.WaitForExit();
        Assert.True(process.ExitCode == 0, $"{Tool} exited with {process.ExitCode}: {error}");
        using var json = JsonDocument.Parse(output);
        var root = json.RootElement;
        var structs = new Dictionary<string, Struct>();
        foreach (var s in root.GetProperty("structs").EnumerateObject())
            structs[s.Name] = new Struct(
                s.Value.GetProperty("size").GetInt32(), s.Value.GetProperty("align").GetInt32(),
                s.Value.GetProperty("fields").EnumerateArray()
                       .Select(f => new Field(f.GetProperty("name").GetString()!, f.GetProperty("offset").GetInt32(), f.GetProperty("size").GetInt32()))
                       .ToList());
        return new Dump(
            root.GetProperty("api_version").GetInt32(),
            structs,
            root.GetProperty("statuses").EnumerateObject().ToDictionary(p => p.Name, p => p.Value.GetInt32()),
            root.GetProperty("defines").EnumerateObject().ToDictionary(p => p.Name, p => p.Value.GetInt64()));
    }

    /// <summary>The public headers, as copied next to the tests.</summary>
    public static readonly string[] Headers = { "remotecache.h", "remotecache_admin.h" };

    /// <summary>The names of the headers' numeric defines (what the tool must report), read from the headers themselves.</summary>
    public static IReadOnlyList<string> HeaderDefineNames() =>
        Headers.SelectMany(h => DefineRegex().Matches(File.ReadAllText(Path.Combine(AppContext.BaseDirectory, h)))
                                             .Select(m => m.Groups[1].Value))
               .ToList();

    /// <summary>RC_MAX_TOKEN_BYTES → MaxTokenBytes, cache_id → CacheId, RC_E_IN_USE → InUse.</summary>
    public static string Pascal(string cName) =>
        string.Concat(cName.Split('_', StringSplitOptions.RemoveEmptyEntries)
                           .Select(p => char.ToUpperInvariant(p[0]) + p[1..].ToLowerInvariant()));

    [GeneratedRegex(@"^[ \t]*#[ \t]*define[ \t]+(RC_(?:MAX|DEFAULT|MIN|OPEN|MIGRATION|SEAL)_\w+|RC_API_VERSION)[ \t]+(?:0[xX][0-9A-Fa-f]+|\d+)", RegexOptions.Multiline)]
    private static partial Regex DefineRegex();
}

/// <summary>
/// The P/Invoke layer against the header: struct layouts, status codes, limits and the API version. The interop types
/// are internal, so they are found by name in the RemoteCache assembly.
/// </summary>
public sealed class InteropTests
{
    private static readonly Assembly s_sdk = typeof(RemoteCacheClient).Assembly;

    // Each C struct and its managed twin: internal interop structs, and the public completion the sessions poll into.
    private static readonly Dictionary<string, Type> s_structs = new()
    {
        ["rc_config"] = InteropType("RcConfig"),
        ["rc_cache_options"] = InteropType("RcCacheOptions"),
        ["rc_server_options"] = InteropType("RcServerOptions"),
        ["rc_object_counts"] = InteropType("RcObjectCounts"),
        ["rc_completion"] = typeof(RemoteCacheCompletion),
        ["rc_server_stats"] = InteropType("RcServerStats"),
        ["rc_admin_cache"] = InteropType("RcAdminCache"),
        ["rc_pull_request"] = InteropType("RcPullRequest"),
        ["rc_pull_result"] = InteropType("RcPullResult"),
        ["rc_region_info"] = InteropType("RcRegionInfo"),
    };

    private static Type InteropType(string name) =>
        s_sdk.GetType("RemoteCache.Interop." + name) ?? throw new InvalidOperationException($"RemoteCache.Interop.{name} not found");

    [Fact]
    public void TheToolSeesTheLayoutWeExpect()
    {
        // Checked once by hand (x86-64 System V), so that a tool reporting nonsense fails too.
        var structs = NativeAbi.Get().Structs;
        Assert.Equal(16, structs["rc_config"].Size);
        Assert.Equal(16, structs["rc_completion"].Size);
        Assert.Equal(80, structs["rc_cache_options"].Size);
        Assert.Equal(new[] { 0, 8, 16, 20, 36, 40, 44, 48, 56, 64, 72, 76 }, structs["rc_cache_options"].Fields.Select(f => f.Offset));
        Assert.Equal(96, structs["rc_server_options"].Size);  // 92 bytes of fields (commit_memory last), 8-aligned
        Assert.Equal(128, structs["rc_server_stats"].Size);  // 121 bytes of fields, 8-aligned
        Assert.Equal(56, structs["rc_server_stats"].Fields.Single(f => f.Name == "server_id").Offset);
        Assert.Equal(32, structs["rc_admin_cache"].Size);
    }

    [Fact]
    public void StructsMatchTheHeaderFieldForField()
    {
        var structs = NativeAbi.Get().Structs;
        Assert.Equal(s_structs.Keys.Order(), structs.Keys.Order());  // a new struct in the header needs a C# twin here
        foreach (var (cName, type) in s_structs)
        {
            var c = structs[cName];
            var managed = type.GetFields(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic);
            Assert.True(c.Fields.Count == managed.Length,
                        $"{cName} has {c.Fields.Count} fields, {type.Name} {managed.Length}: " +
                        $"{string.Join(", ", c.Fields.Select(f => f.Name))} / {string.Join(", ", managed.Select(f => f.Name))}");
            foreach (var f in c.Fields)
            {
                string name = NativeAbi.Pascal(f.Name);
                var field = managed.SingleOrDefault(m => string.Equals(m.Name.TrimStart('_'), name, StringComparison.OrdinalIgnoreCase));
                Assert.True(field is not null, $"{type.Name} has no field {name} for {cName}.{f.Name}");
                int offset = (int)Marshal.OffsetOf(type, field.Name);
                Assert.True(f.Offset == offset, $"{type.Name}.{field.Name} at offset {offset}, {cName}.{f.Name} at {f.Offset}");
                int size = field.FieldType.IsEnum ? Marshal.SizeOf(Enum.GetUnderlyingType(field.FieldType))
                         : field.FieldType.IsPointer ? IntPtr.Size
                         : Marshal.SizeOf(field.FieldType);
                Assert.True(f.Size == size, $"{type.Name}.{field.Name} has {size} bytes, {cName}.{f.Name} {f.Size}");
            }
            Assert.True(c.Size == Marshal.SizeOf(type), $"{type.Name} has {Marshal.SizeOf(type)} bytes, {cName} {c.Size}");
            // Blittable: what the runtime passes without marshalling has the same size.
            var unsafeSize = (int)typeof(Unsafe).GetMethod(nameof(Unsafe.SizeOf))!.MakeGenericMethod(type).Invoke(null, null)!;
            Assert.Equal(c.Size, unsafeSize);
        }
    }

    [Fact]
    public void StatusCodesMatchTheHeader()
    {
        var statuses = NativeAbi.Get().Statuses;
        Assert.Contains("RC_E_EXPIRED", statuses.Keys);
        var expected = statuses.ToDictionary(s => NativeAbi.Pascal(s.Key.StartsWith("RC_E_", StringComparison.Ordinal) ? s.Key[5..] : s.Key[3..]),
                                             s => s.Value);
        var managed = Enum.GetValues<RemoteCacheStatus>().ToDictionary(s => s.ToString(), s => (int)s);
        Assert.Equal(expected.OrderBy(p => p.Value), managed.OrderBy(p => p.Value));
    }

    [Fact]
    public void TheToolReportsEveryDefineAndTheBindingsHaveThem()
    {
        var defines = NativeAbi.Get().Defines;
        Assert.Equal(NativeAbi.HeaderDefineNames().Order(), defines.Keys.Order());
        Assert.Equal(384L, defines["RC_DEFAULT_SHM_SOCKET_MODE"]);  // 0600 is octal in C
        var constants = InteropType("NativeLimits").GetFields(BindingFlags.Public | BindingFlags.Static)
                                                   .Where(f => f.IsLiteral)
                                                   .ToDictionary(f => f.Name, f => Convert.ToInt64(f.GetRawConstantValue(), CultureInfo.InvariantCulture));
        var expected = defines.ToDictionary(d => NativeAbi.Pascal(d.Key[3..]), d => d.Value);
        Assert.Equal(expected.OrderBy(p => p.Key, StringComparer.Ordinal), constants.OrderBy(p => p.Key, StringComparer.Ordinal));
    }

    [Fact]
    public void TheLoadedLibraryHasTheApiVersionTheBindingsNeed()
    {
        Assert.Equal(NativeAbi.Get().ApiVersion, RemoteCacheDiagnostics.NativeApiVersion);
        Assert.Equal(NativeAbi.Define("RC_API_VERSION"), RemoteCacheDiagnostics.NativeApiVersion);
        // A real call goes through the version check and succeeds.
        Assert.True(RemoteCacheDiagnostics.GetNativeObjectCounts().Caches >= 0);
    }

    [Fact]
    public void DefaultsAndLimitsOfTheApiAreTheHeaders()
    {
        var options = new RemoteCacheOptions();
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_SESSION_CAPACITY"), options.SessionCapacity);
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_OP_TIMEOUT_MS"), (long)options.OperationTimeout.TotalMilliseconds);
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_CONNECT_TIMEOUT_MS"), (long)options.ConnectTimeout.TotalMilliseconds);
        Assert.Null(options.Token);
        Assert.False(options.Exclusive);
        Assert.Null(options.Capabilities);
        Assert.Equal<long>(RemoteCacheOptions.MaxTokenBytes, NativeAbi.Define("RC_MAX_TOKEN_BYTES"));
        Assert.Equal<long>(RemoteCacheOptions.MaxRegionsPerServer, NativeAbi.Define("RC_MAX_REGIONS_PER_SERVER"));
        Assert.Equal<long>(RemoteCacheOptions.MaxEndpoints, NativeAbi.Define("RC_MAX_ENDPOINTS"));
        Assert.Equal<long>(RemoteCacheOptions.MaxSessionCapacity, NativeAbi.Define("RC_MAX_SESSION_CAPACITY"));
        Assert.Equal<long>(RemoteCacheCapability.MinAdmissionKeyBytes, NativeAbi.Define("RC_MIN_ADMISSION_KEY_BYTES"));
        Assert.Equal<long>(CacheConfig.MaxClientThreads, NativeAbi.Define("RC_MAX_CLIENT_THREADS"));
        Assert.Equal<long>(CacheConfig.MaxServerThreads, NativeAbi.Define("RC_MAX_SERVER_THREADS"));
        Assert.Equal<long>(CacheConfig.MaxBatchSize, NativeAbi.Define("RC_MAX_BATCH_SIZE"));
        Assert.Equal<long>(CacheConfig.MaxQueueDepth, NativeAbi.Define("RC_MAX_QUEUE_DEPTH"));
        var server = new RemoteCacheServerOptions();
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_REGION_SIZE"), server.RegionSize);
        Assert.Equal(NativeAbi.Define("RC_DEFAULT_MEMORY_LIMIT"), server.MemoryLimit);
    }
}
