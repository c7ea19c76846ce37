using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using System.Text.Json.Serialization;

namespace RemoteCache.Manager.Security;

/// <summary>The roles an API key may carry.</summary>
public static class Roles
{
    /// <summary>Allocates and manages its own caches (service CacheManager).</summary>
    public const string Tenant = "tenant";

    /// <summary>Runs the server pool (service ServerPool).</summary>
    public const string Operator = "operator";
}

/// <summary>One API key: whose it is, what it may do, how much memory its tenant may hold.</summary>
/// <param name="Tenant">The tenant the key acts for (several keys may share one).</param>
/// <param name="Sha256">Hex SHA-256 of the key (the file never needs the key itself).</param>
/// <param name="Roles">"tenant", "operator" or both.</param>
/// <param name="QuotaBytes">Cache capacity the tenant may hold in all; null: no limit.</param>
public sealed record ApiKey(string Tenant, string Sha256, IReadOnlyList<string> Roles, long? QuotaBytes);

/// <summary>
/// The API keys file (JSON: <c>{"keys": [{"tenant": "a", "sha256": "…", "roles": ["tenant"], "quotaBytes": 1073741824}]}</c>).
/// Keys are bearer tokens; the file holds only their SHA-256, compared in constant time.
/// </summary>
public sealed class ApiKeyStore
{
    private static readonly JsonSerializerOptions s_json = new()
    {
        PropertyNamingPolicy = JsonNamingPolicy.CamelCase,
        ReadCommentHandling = JsonCommentHandling.Skip,
        AllowTrailingCommas = true,
        WriteIndented = true,
        DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull,
    };

    private readonly IReadOnlyList<(byte[] Hash, ApiKey Key)> _keys;

    public ApiKeyStore(IEnumerable<ApiKey> keys)
    {
        var list = new List<(byte[], ApiKey)>();
        foreach (var key in keys)
        {
            if (string.IsNullOrWhiteSpace(key.Tenant))
                throw new FormatException("a key has no tenant");
            byte[] hash;
            try
            {
                hash = Convert.FromHexString(key.Sha256 ?? "");
            }
            catch (FormatException)
            {
                hash = Array.Empty<byte>();
            }
            if (hash.Length != 32)
                throw new FormatException($"the key of tenant '{key.Tenant}': sha256 must be 64 hex digits");
            if (key.Roles is null || key.Roles.Count == 0 || key.Roles.Any(r => r is not (Roles.Tenant or Roles.Operator)))
                throw new FormatException($"the key of tenant '{key.Tenant}': roles must be \"{Roles.Tenant}\" and/or \"{Roles.Operator}\"");
            if (key.QuotaBytes is < 0)
                throw new FormatException($"the key of tenant '{key.Tenant}': quotaBytes must be 0 or more");
            list.Add((hash, key));
        }
        if (list.Count == 0)
            throw new FormatException("no keys");
        _keys = list;
    }

    /// <summary>The key whose SHA-256 matches <paramref name="presented"/>, or null.</summary>
    public ApiKey? Find(string presented)
    {
        byte[] hash = SHA256.HashData(Encoding.UTF8.GetBytes(presented));
        ApiKey? found = null;
        foreach (var (h, key) in _keys)
            if (CryptographicOperations.FixedTimeEquals(h, hash))
                found = key;
        return found;
    }

    /// <summary>The quota of <paramref name="tenant"/> (the smallest of its keys'), or null for none.</summary>
    public long? QuotaOf(string tenant) =>
        _keys.Where(k => k.Key.Tenant == tenant).Select(k => k.Key.QuotaBytes).Aggregate((long?)null, (a, b) => b is null ? a : a is null ? b : Math.Min(a.Value, b.Value));

    /// <summary>Reads a keys file.</summary>
    /// <exception cref="FormatException">Unreadable or invalid (named).</exception>
    public static ApiKeyStore Load(string path)
    {
        try
        {
            var file = JsonSerializer.Deserialize<KeysFile>(File.ReadAllText(path), s_json) ?? throw new FormatException("null");
            return new ApiKeyStore(file.Keys ?? new List<ApiKey>());
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or JsonException or FormatException)
        {
            throw new FormatException($"{path}: {e.Message}", e);
        }
    }

    /// <summary>
    /// Writes a keys file with one new key for <paramref name="tenant"/> (both roles, no quota), readable by the owner
    /// only, and returns the key (shown once; the file keeps its hash).
    /// </summary>
    public static string Generate(string path, string tenant)
    {
        string key = "rck_" + Convert.ToBase64String(RandomNumberGenerator.GetBytes(24)).Replace('+', '-').Replace('/', '_');
        var file = new KeysFile { Keys = new List<ApiKey> { new(tenant, Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(key))).ToLowerInvariant(), new[] { Roles.Tenant, Roles.Operator }, null) } };
        WritePrivate(path, JsonSerializer.Serialize(file, s_json));
        return key;
    }

    /// <summary>Writes <paramref name="text"/> to a new file only its owner can read.</summary>
    public static void WritePrivate(string path, string text) => WritePrivate(path, Encoding.UTF8.GetBytes(text));

    /// <summary>Writes <paramref name="bytes"/> to a new file only its owner can read.</summary>
    public static void WritePrivate(string path, byte[] bytes)
    {
        using var stream = new FileStream(path, new FileStreamOptions
        {
            Mode = FileMode.CreateNew, Access = FileAccess.Write, UnixCreateMode = UnixFileMode.UserRead | UnixFileMode.UserWrite,
        });
        stream.Write(bytes);
    }

    private sealed class KeysFile
    {
        public List<ApiKey>? Keys { get; set; }
    }
}
