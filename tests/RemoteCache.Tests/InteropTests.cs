using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;
using RemoteCache.Interop;
using Xunit;

namespace RemoteCache.Tests;

/// <summary>
/// remotecache.h as a C compiler for x86-64 Linux (System V ABI) lays it out: its structs (field offsets and sizes),
/// its status codes and its numeric defines, read from the header copied next to the tests.
/// </summary>
internal static partial class NativeHeader
{
    public static string Path => System.IO.Path.Combine(AppContext.BaseDirectory, "remotecache.h");

    private static readonly Lazy<string> s_text = new(() => File.ReadAllText(Path));

    /// <summary>The header without its comments.</summary>
    private static string Code => CommentRegex().Replace(s_text.Value, " ");

    public sealed record Field(string Name, string Type, bool IsPointer, int Offset, int Size);

    public sealed record Struct(string Name, IReadOnlyList<Field> Fields, int Size, int Alignment);

    private static readonly Dictionary<string, (int Size, int Alignment)> s_scalars = new()
    {
        ["uint8_t"] = (1, 1), ["int8_t"] = (1, 1), ["char"] = (1, 1),
        ["uint16_t"] = (2, 2), ["int16_t"] = (2, 2),
        ["uint32_t"] = (4, 4), ["int32_t"] = (4, 4), ["int"] = (4, 4),
        ["uint64_t"] = (8, 8), ["int64_t"] = (8, 8), ["size_t"] = (8, 8),
    };

    /// <summary>Every <c>typedef struct NAME { ... } NAME;</c> of the header, laid out.</summary>
    public static IReadOnlyDictionary<string, Struct> Structs()
    {
        var result = new Dictionary<string, Struct>();
        foreach (Match m in StructRegex().Matches(Code))
        {
            string name = m.Groups[1].Value;
            var fields = new List<Field>();
            int offset = 0, alignment = 1;
            foreach (var raw in m.Groups[2].Value.Split(';'))
            {
                var decl = Regex.Replace(raw, @"\s+", " ").Trim();
                if (decl.Length == 0)
                    continue;
                var parts = Regex.Match(decl, @"^(.*?)\s*\b([A-Za-z_]\w*)$");
                Assert.True(parts.Success && !decl.Contains('[') && !decl.Contains('('), $"{name}: cannot read the declaration '{decl}'");
                string type = parts.Groups[1].Value.Trim();
                bool pointer = type.Contains('*');
                string bare = Regex.Replace(type, @"\bconst\b", "").Trim();
                int size, align;
                if (pointer)
                    (size, align) = (8, 8);
                else if (s_scalars.TryGetValue(bare, out var scalar))
                    (size, align) = scalar;
                else if (result.TryGetValue(bare, out var nested))
                    (size, align) = (nested.Size, nested.Alignment);
                else
                    throw new InvalidOperationException($"{name}.{parts.Groups[2].Value}: unknown type '{type}'");
                offset = (offset + align - 1) / align * align;
                fields.Add(new Field(parts.Groups[2].Value, bare, pointer, offset, size));
                offset += size;
                alignment = Math.Max(alignment, align);
            }
            result[name] = new Struct(name, fields, (offset + alignment - 1) / alignment * alignment, alignment);
        }
        return result;
    }

    /// <summary>The members of <c>enum rc_status</c>: C name and value.</summary>
    public static IReadOnlyDictionary<string, int> Statuses()
    {
        var body = Regex.Match(Code, @"typedef\s+enum\s+rc_status\s*\{(.*?)\}\s*rc_status\s*;", RegexOptions.Singleline);
        Assert.True(body.Success, "enum rc_status not found in remotecache.h");
        return Regex.Matches(body.Groups[1].Value, @"\b(RC_\w+)\s*=\s*(-?\d+)")
            .ToDictionary(m => m.Groups[1].Value, m => int.Parse(m.Groups[2].Value, CultureInfo.InvariantCulture));
    }

    /// <summary>Every numeric <c>#define RC_MAX_* / RC_DEFAULT_* / RC_MIN_* / RC_OPEN_*</c>, with C's reading of the literal.</summary>
    public static IReadOnlyDictionary<string, ulong> Limits()
    {
        var result = new Dictionary<string, ulong>();
        foreach (Match m in DefineRegex().Matches(Code))
        {
            string digits = m.Groups[2].Value;
            result[m.Groups[1].Value] = digits.StartsWith("0x", StringComparison.OrdinalIgnoreCase)
                ? Convert.ToUInt64(digits[2..], 16)
                : digits.Length > 1 && digits[0] == '0' ? Convert.ToUInt64(digits, 8)
                : ulong.Parse(digits, CultureInfo.InvariantCulture);
        }
        return result;
    }

    public static long Define(string name) => (long)Limits()[name];

    /// <summary>RC_MAX_TOKEN_BYTES → MaxTokenBytes, cache_id → CacheId, RC_E_IN_USE → InUse.</summary>
    public static string Pascal(string cName) =>
        string.Concat(cName.Split('_', StringSplitOptions.RemoveEmptyEntries)
                           .Select(p => char.ToUpperInvariant(p[0]) + p[1..].ToLowerInvariant()));

    [GeneratedRegex(@"/\*.*?\*/|//[^\n]*", RegexOptions.Singleline)]
    private static partial Regex CommentRegex();

    [GeneratedRegex(@"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\1\s*;", RegexOptions.Singleline)]
    private static partial Regex StructRegex();

    [GeneratedRegex(@"^[ \t]*#[ \t]*define[ \t]+(RC_(?:MAX|DEFAULT|MIN|OPEN)_\w+)[ \t]+(0[xX][0-9A-Fa-f]+|\d+)[uUlL]*[ \t]*$", RegexOptions.Multiline)]
    private static partial Regex DefineRegex();
}

/// <summary>The P/Invoke layer against the header: struct layouts, status codes, limits.</summary>
public sealed class InteropTests
{
    private static readonly Dictionary<string, Type> s_scalarTypes = new()
    {
        ["uint64_t"] = typeof(ulong), ["int64_t"] = typeof(long), ["size_t"] = typeof(nuint),
        ["uint32_t"] = typeof(uint), ["int32_t"] = typeof(int), ["int"] = typeof(int),
    };

    private static readonly Dictionary<string, Type> s_structs = new()
    {
        ["rc_config"] = typeof(RcConfig),
        ["rc_cache_options"] = typeof(RcCacheOptions),
        ["rc_completion"] = typeof(RcCompletion),
        ["rc_server_options"] = typeof(RcServerOptions),
    };

    [Fact]
    public void HeaderLayoutIsTheOneWeExpect()
    {
        // The layout computed from the header, checked once by hand (x86-64 System V), so the parser is checked too.
        var structs = NativeHeader.Structs();
        Assert.Equal(16, structs["rc_config"].Size);
        Assert.Equal(16, structs["rc_completion"].Size);
        var cache = structs["rc_cache_options"];
        Assert.Equal(64, cache.Size);
        Assert.Equal(new[] { 0, 8, 16, 20, 36, 40, 44, 48, 56 }, cache.Fields.Select(f => f.Offset));
        var server = structs["rc_server_options"];
        Assert.Equal(88, server.Size);
        Assert.Equal(new[] { 0, 8, 16, 24, 32, 36, 40, 44, 48, 56, 64, 72, 80 }, server.Fields.Select(f => f.Offset));
    }

    [Fact]
    public void StructsMatchTheHeaderFieldForField()
    {
        var structs = NativeHeader.Structs();
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
                string name = NativeHeader.Pascal(f.Name);
                var field = type.GetField(name, BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic);
                Assert.True(field is not null, $"{type.Name} has no field {name} for {cName}.{f.Name}");
                Type expected = f.IsPointer ? typeof(IntPtr)
                              : s_scalarTypes.TryGetValue(f.Type, out var scalar) ? scalar
                              : s_structs[f.Type];
                Assert.True(field.FieldType == expected || (f.IsPointer && field.FieldType.IsPointer),
                            $"{type.Name}.{name} is {field.FieldType.Name}; {cName}.{f.Name} is {f.Type}{(f.IsPointer ? "*" : "")}");
                Assert.True(f.Offset == (int)Marshal.OffsetOf(type, name),
                            $"{type.Name}.{name} at offset {Marshal.OffsetOf(type, name)}, {cName}.{f.Name} at {f.Offset}");
                Assert.Equal(f.Size, Marshal.SizeOf(field.FieldType));
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
        var statuses = NativeHeader.Statuses();
        Assert.Contains("RC_E_EXPIRED", statuses.Keys);
        var expected = statuses.ToDictionary(s => NativeHeader.Pascal(s.Key.StartsWith("RC_E_", StringComparison.Ordinal) ? s.Key[5..] : s.Key[3..]),
                                             s => s.Value);
        var managed = Enum.GetValues<RcStatus>().ToDictionary(s => s.ToString(), s => (int)s);
        Assert.Equal(expected.OrderBy(p => p.Value), managed.OrderBy(p => p.Value));
        foreach (var (cName, value) in statuses)
            Assert.Equal(cName, Marshal.PtrToStringUTF8(NativeMethods.StatusNamePtr(value)));
    }

    [Fact]
    public void NativeLimitsAreTheHeadersDefines()
    {
        var defines = NativeHeader.Limits();
        Assert.Equal(384ul, defines["RC_DEFAULT_SHM_SOCKET_MODE"]);  // 0600 is octal in C
        var constants = typeof(NativeLimits).GetFields(BindingFlags.Public | BindingFlags.Static)
                                            .Where(f => f.IsLiteral)
                                            .ToDictionary(f => f.Name, f => Convert.ToUInt64(f.GetRawConstantValue(), CultureInfo.InvariantCulture));
        var expected = defines.ToDictionary(d => NativeHeader.Pascal(d.Key[3..]), d => d.Value);
        Assert.Equal(expected.OrderBy(p => p.Key, StringComparer.Ordinal), constants.OrderBy(p => p.Key, StringComparer.Ordinal));
    }

    [Fact]
    public void DefaultsAndLimitsOfTheApiAreTheHeaders()
    {
        var options = new RemoteCacheOptions();
        Assert.Equal(NativeHeader.Define("RC_DEFAULT_SESSION_CAPACITY"), options.SessionCapacity);
        Assert.Equal(NativeHeader.Define("RC_DEFAULT_OP_TIMEOUT_MS"), (long)options.OperationTimeout.TotalMilliseconds);
        Assert.Equal(NativeHeader.Define("RC_DEFAULT_CONNECT_TIMEOUT_MS"), (long)options.ConnectTimeout.TotalMilliseconds);
        Assert.Null(options.Token);
        Assert.False(options.Exclusive);
        Assert.Null(options.Capabilities);
        Assert.Equal<long>(RemoteCacheOptions.MaxTokenBytes, NativeHeader.Define("RC_MAX_TOKEN_BYTES"));
        Assert.Equal<long>(RemoteCacheOptions.MaxRegionsPerServer, NativeHeader.Define("RC_MAX_REGIONS_PER_SERVER"));
        Assert.Equal<long>(RemoteCacheCapability.MinAdmissionKeyBytes, NativeHeader.Define("RC_MIN_ADMISSION_KEY_BYTES"));
        Assert.Equal<long>(CacheConfig.MaxClientThreads, NativeHeader.Define("RC_MAX_CLIENT_THREADS"));
        Assert.Equal<long>(CacheConfig.MaxServerThreads, NativeHeader.Define("RC_MAX_SERVER_THREADS"));
        Assert.Equal<long>(CacheConfig.MaxBatchSize, NativeHeader.Define("RC_MAX_BATCH_SIZE"));
        Assert.Equal<long>(CacheConfig.MaxQueueDepth, NativeHeader.Define("RC_MAX_QUEUE_DEPTH"));
    }
}
