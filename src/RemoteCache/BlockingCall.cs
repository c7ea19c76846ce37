using System;
using System.Collections.Concurrent;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache;

/// <summary>
/// Runs a native call that blocks (a connect, a migration fence, an admin request such as a region pull) on a thread
/// of its own: these wait for the network or for other threads for up to seconds, and on pool threads they would
/// starve the application's own asynchronous work (and the gRPC calls of a managed cache's flows) on small machines.
/// The threads are kept a while after their call and reused: a manager makes several admin calls for each cache it
/// frees, and a thread started for each cost more than the calls themselves. No call ever waits for another: a call
/// that finds no idle thread starts one.
/// </summary>
internal static class BlockingCall
{
    // An idle thread ends after this long without a call.
    private static readonly TimeSpan s_idleLifetime = TimeSpan.FromSeconds(10);

    private static readonly ConcurrentStack<Worker> s_idle = new();

    public static Task<T> Start<T>(Func<T> call)
    {
        var done = new TaskCompletionSource<T>(TaskCreationOptions.RunContinuationsAsynchronously);
        Run(() =>
        {
            try
            {
                done.SetResult(call());
            }
            catch (Exception e)
            {
                done.SetException(e);
            }
        });
        return done.Task;
    }

    public static Task Start(Action call) =>
        Start(() =>
        {
            call();
            return true;
        });

    private static void Run(Action work)
    {
        while (s_idle.TryPop(out var worker))
            if (worker.TryAssign(work))
                return;
        var thread = new Thread(new Worker(work).Loop) { IsBackground = true, Name = "RemoteCache blocking call" };
        thread.Start();
    }

    private sealed class Worker
    {
        private const int Busy = 0, Idle = 1, Retired = 2;
        // Waited on without spinning (a SemaphoreSlim spins, yielding, before it sleeps): a call comes in milliseconds or
        // seconds, never within a spin, and every idle thread's spin after each call cost the manager a tenth of its CPU.
        private readonly ManualResetEventSlim _assigned = new(false, spinCount: 0);
        private Action? _work;
        private int _state = Busy;

        public Worker(Action work) => _work = work;

        // Called by whoever popped this worker off the idle stack; false if it retired meanwhile.
        public bool TryAssign(Action work)
        {
            if (Interlocked.CompareExchange(ref _state, Busy, Idle) != Idle)
                return false;
            _work = work;
            _assigned.Set();
            return true;
        }

        public void Loop()
        {
            for (;;)
            {
                var work = _work!;
                _work = null;
                work();  // never throws: Start catches into the task
                Volatile.Write(ref _state, Idle);
                s_idle.Push(this);
                if (!_assigned.Wait(s_idleLifetime))
                {
                    // Retire, unless a caller popped this worker and is assigning it a call right now.
                    if (Interlocked.CompareExchange(ref _state, Retired, Idle) == Idle)
                    {
                        _assigned.Dispose();
                        return;  // stays on the stack until popped, and is skipped then
                    }
                    _assigned.Wait();
                }
                _assigned.Reset();  // one assignment per idle spell (TryAssign's exchange), so none is lost here
            }
        }
    }
}
