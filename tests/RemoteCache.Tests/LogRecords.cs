using System.Collections.Generic;
using System.Linq;
using Microsoft.Extensions.Logging.Testing;

namespace RemoteCache.Tests;

/// <summary>What the log tests read from FakeLogger's records.</summary>
internal static class LogRecords
{
    /// <summary>A record's structured fields by name (values as FakeLogger formats them).</summary>
    public static IReadOnlyDictionary<string, object?> Fields(FakeLogRecord record) =>
        record.StructuredState!.ToDictionary(p => p.Key, p => (object?)p.Value);
}
