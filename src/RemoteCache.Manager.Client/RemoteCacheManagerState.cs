using System;

namespace RemoteCache;

/// <summary>One manager replica and what its health service said (<see cref="RemoteCacheManagerClient.CheckManagersAsync"/>).</summary>
/// <param name="Address">The replica.</param>
/// <param name="Serving">Whether it serves: its store answers and it knows a leader.</param>
/// <param name="Status">What it said ("Serving", "NotServing"), or why it did not answer (the gRPC status and its detail, at most 256 characters).</param>
public sealed record RemoteCacheManagerState(Uri Address, bool Serving, string Status);
