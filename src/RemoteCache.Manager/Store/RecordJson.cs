using System.Text.Json;

namespace RemoteCache.Manager.Store;

/// <summary>How every store writes its records (camelCase JSON): one form, so that a state moves between stores as it is.</summary>
internal static class RecordJson
{
    public static readonly JsonSerializerOptions Options = new() { PropertyNamingPolicy = JsonNamingPolicy.CamelCase };
}
