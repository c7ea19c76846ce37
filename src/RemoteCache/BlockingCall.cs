using System;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache;

/// <summary>
/// Runs a native call that blocks (a connect, a migration fence, an admin request such as a region pull) on a thread
/// of its own: these wait for the network or for other threads for up to seconds, and on pool threads they would
/// starve the application's own asynchronous work (and the gRPC calls of a managed cache's flows) on small machines.
/// </summary>
internal static class BlockingCall
{
    public static Task<T> Start<T>(Func<T> call) =>
        Task.Factory.StartNew(call, CancellationToken.None, TaskCreationOptions.LongRunning | TaskCreationOptions.DenyChildAttach, TaskScheduler.Default);

    public static Task Start(Action call) =>
        Task.Factory.StartNew(call, CancellationToken.None, TaskCreationOptions.LongRunning | TaskCreationOptions.DenyChildAttach, TaskScheduler.Default);
}
