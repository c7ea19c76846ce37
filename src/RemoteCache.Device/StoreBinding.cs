// Binds the devices' shared sources (RemoteCacheDevice, TieredDevice and their helpers) to FASTER. RemoteCache.Garnet
// compiles the same sources against Tsavorite, FASTER's fork under Garnet, with its own StoreBinding.cs: the two
// stores' device interfaces differ only in their namespace, their exception type and the completion callback's
// arity, which this file absorbs.
global using FASTER.core;
using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;

namespace RemoteCache.Device;

internal static class StoreBinding
{
    /// <summary>Completes a store's I/O.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void Complete(this DeviceIOCompletionCallback callback, uint errorCode, uint numBytes, object context) =>
        callback(errorCode, numBytes, context);

    /// <summary>The exception the store expects from a device that refuses its set-up.</summary>
    public static Exception Refusal(string message) => new FasterException(message);
}

public sealed partial class TieredDevice
{
    private static readonly DeviceIOCompletionCallback s_onRead = OnTierRead;
    private static readonly DeviceIOCompletionCallback s_onWrite = OnTierWrite;

    private static DeviceIOCompletionCallback Completing(TaskCompletionSource<(uint, uint)> done) =>
        (error, bytes, _) => done.TrySetResult((error, bytes));
}
