using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// The state's commit queue (<see cref="ManagerState.Stage"/>): changes staged while a commit is under way go to the
/// store together, in order, each caller with its own events; none is visible before it is committed; one the store
/// does not take fails with all staged after it, and the next change is built on what the store holds.
/// </summary>
public sealed class GroupCommitTests : IAsyncLifetime
{
    private readonly string _dir = Directory.CreateTempSubdirectory("group-commit-").FullName;
    private readonly ServiceProvider _services = new ServiceCollection().AddMetrics().BuildServiceProvider();
    private GatedStore _store = null!;
    private ManagerState _state = null!;

    public async Task InitializeAsync()
    {
        _store = new GatedStore(await SqliteManagerStore.OpenAsync(Path.Combine(_dir, "m.db"), CancellationToken.None));
        var leadership = new SoleLeadership();
        _state = new ManagerState(_store, new EventHub(), TimeProvider.System, NullLogger<ManagerState>.Instance,
                                  new ManagerMetrics(_services.GetRequiredService<IMeterFactory>()), leadership);
        await _state.RefreshAsync(CancellationToken.None);
    }

    public async Task DisposeAsync()
    {
        _store.Open();
        await _store.DisposeAsync();
        await _services.DisposeAsync();
        Directory.Delete(_dir, recursive: true);
    }

    [Fact]
    public async Task ChangesStagedDuringACommitGoToTheStoreTogetherInOrder()
    {
        _store.Close();
        var first = await StageAsync(Put(1));
        await _store.Arrived(1);  // the first is at the store, held there
        var second = await StageAsync(Put(2));
        var third = await StageAsync(Put(3), Delete(1));
        Assert.False(second.IsCompleted || third.IsCompleted);
        _store.Open();
        Assert.Equal(new long[] { 1 }, (await first).Select(e => e.Sequence));
        Assert.Equal(new long[] { 2 }, (await second).Select(e => e.Sequence));
        Assert.Equal(new long[] { 3, 4 }, (await third).Select(e => e.Sequence));
        // The two staged while the first committed were one transaction: cache 1 put by the first, removed by the third.
        Assert.Equal(2, _store.Applied);
        var snapshot = await _store.LoadAsync(CancellationToken.None);
        Assert.Equal(new ulong[] { 2, 3 }, snapshot.Caches.Select(c => c.CacheId).Order());
        Assert.Equal(new ulong[] { 2, 3 }, _state.View.Caches.Keys.Order());
        Assert.Equal(new[] { "put 1", "put 2", "put 3", "delete 1" },
                     (await AllEventsAsync(1, 2, 3)).Select(e => Encoding.UTF8.GetString(e.Payload).Split(' ', 3)[2]));
    }

    [Fact]
    public async Task AStagedChangeIsBuiltOnButNotSeenUntilCommitted()
    {
        _store.Close();
        var staged = await StageAsync(Put(7));
        await _store.Arrived(1);
        Assert.False(_state.View.Caches.ContainsKey(7));  // readers see what the store holds
        await _state.EnterAsync(CancellationToken.None);
        try
        {
            Assert.True(_state.Caches.ContainsKey(7));  // the next change is built on it
        }
        finally
        {
            _state.Lock.Release();
        }
        _store.Open();
        await staged;
        Assert.True(_state.View.Caches.ContainsKey(7));
    }

    [Fact]
    public async Task AChangeTheStoreRefusesFailsWithEveryChangeBuiltOnItAndTheNextIsBuiltOnTheStore()
    {
        await (await StageAsync(Put(1)));
        _store.Close();
        _store.FailNext = new StoreUnavailableException("etcd went away (test)", new IOException());
        var refused = await StageAsync(Put(2));
        await _store.Arrived(2);
        var builtOnIt = await StageAsync(Put(3));
        _store.Open();
        var e = await Assert.ThrowsAsync<StoreUnavailableException>(() => refused);
        Assert.Contains("etcd went away", e.Message);
        var after = await Assert.ThrowsAsync<StoreConflictException>(() => builtOnIt);
        Assert.Contains("etcd went away", after.Message);
        Assert.Contains("not made", after.Message);
        Assert.Equal(new ulong[] { 1 }, _state.View.Caches.Keys);
        await _state.EnterAsync(CancellationToken.None);
        try
        {
            Assert.Equal(new ulong[] { 1 }, _state.Caches.Keys);  // the working maps are the store's again
        }
        finally
        {
            _state.Lock.Release();
        }
        await (await StageAsync(Put(4)));
        Assert.Equal(new ulong[] { 1, 4 }, (await _store.LoadAsync(CancellationToken.None)).Caches.Select(c => c.CacheId).Order());
        Assert.Equal(new ulong[] { 1, 4 }, _state.View.Caches.Keys.Order());
    }

    [Fact]
    public async Task AStateReadAgainWaitsForTheChangesInFlightSoNoneLandsOnIt()
    {
        _store.Close();
        var staged = await StageAsync(Put(5));
        await _store.Arrived(1);
        var refresh = _state.RefreshAsync(CancellationToken.None);  // as a leader deposed and elected again reads the store
        await Task.Delay(50);
        Assert.False(refresh.IsCompleted);
        _store.Open();
        await staged;
        await refresh;
        Assert.True(_state.View.Caches.ContainsKey(5));
        await _state.EnterAsync(CancellationToken.None);
        try
        {
            Assert.True(_state.Caches.ContainsKey(5));  // what the next change is built on holds the change that landed
        }
        finally
        {
            _state.Lock.Release();
        }
    }

    [Fact]
    public void MergedChangesWriteEachRecordOnceAsTheLastLeftIt()
    {
        var a = Put(1);
        a.PutServers.Add(Server("s1", cacheId: 1));
        var b = Delete(1);
        b.PutServers.Add(Server("s1", cacheId: 0));
        b.PutCaches.Add(StoreContract.Cache(2, "t"));
        var c = Put(1);
        c.DeleteServers.Add("s9");
        var merged = StoreChange.Merge(new[] { a, b, c });
        Assert.Equal(new ulong[] { 1, 2 }, merged.PutCaches.Select(x => x.CacheId).Order());
        Assert.Empty(merged.DeleteCaches);
        Assert.Equal(0ul, Assert.Single(merged.PutServers).CacheId);
        Assert.Equal("s9", Assert.Single(merged.DeleteServers));
        Assert.Equal(a.Events.Concat(b.Events).Concat(c.Events), merged.Events);
        Assert.Equal(2 + 1 + 1 + 2 * 3 + 2, merged.Writes);
        Assert.True(merged.Writes <= a.Writes + b.Writes + c.Writes - 2 * 2);
    }

    private static StoreChange Put(ulong id)
    {
        var change = new StoreChange();
        change.PutCaches.Add(StoreContract.Cache(id, "t"));
        change.Events.Add((id, "t", seq => Encoding.UTF8.GetBytes($"{seq} {id} put {id}")));
        return change;
    }

    private static StoreChange Delete(ulong id)
    {
        var change = new StoreChange();
        change.DeleteCaches.Add(id);
        change.Events.Add((id, "t", seq => Encoding.UTF8.GetBytes($"{seq} {id} delete {id}")));
        return change;
    }

    private static ServerRecord Server(string id, ulong cacheId) =>
        new(id, new Dictionary<string, string> { ["tcp"] = "tcp:127.0.0.1:1" }, "small", false, "static") { CacheId = cacheId };

    // Stages the changes one after another under the lock, as a unit does; the tasks end when each is committed.
    private async Task<Task<IReadOnlyList<StoredEvent>>> StageAsync(params StoreChange[] changes)
    {
        await _state.EnterAsync(CancellationToken.None);
        try
        {
            var staged = changes.Select(_state.Stage).ToList();
            return staged.Count == 1 ? staged[0] : CombineAsync(staged);
        }
        finally
        {
            _state.Lock.Release();
        }
    }

    private static async Task<IReadOnlyList<StoredEvent>> CombineAsync(List<Task<IReadOnlyList<StoredEvent>>> staged) =>
        (await Task.WhenAll(staged)).SelectMany(e => e).ToList();

    private async Task<List<StoredEvent>> AllEventsAsync(params ulong[] caches)
    {
        var events = new List<StoredEvent>();
        foreach (ulong id in caches)
            events.AddRange(await _store.EventsAsync(id, 1, CancellationToken.None));
        return events.OrderBy(e => e.Sequence).ToList();
    }

    /// <summary>A store whose commits wait while it is closed, and that refuses one when told to.</summary>
    private sealed class GatedStore(IManagerStore inner) : IManagerStore
    {
        private readonly object _gate = new();
        private TaskCompletionSource _open = Opened();
        private int _arrived;
        private int _applied;

        public Exception? FailNext { get; set; }

        public int Applied => Volatile.Read(ref _applied);

        public void Close()
        {
            lock (_gate)
                if (_open.Task.IsCompleted)
                    _open = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        }

        public void Open()
        {
            lock (_gate)
                _open.TrySetResult();
        }

        /// <summary>Waits until <paramref name="count"/> commits have reached the store since it was made.</summary>
        public async Task Arrived(int count)
        {
            var until = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            while (Volatile.Read(ref _arrived) < count)
            {
                Assert.True(DateTime.UtcNow < until, $"{count} commits did not reach the store within 10 s");
                await Task.Delay(5);
            }
        }

        public async Task<IReadOnlyList<StoredEvent>> ApplyAsync(StoreChange change, CancellationToken cancellationToken)
        {
            Task open;
            lock (_gate)
                open = _open.Task;
            Interlocked.Increment(ref _arrived);
            await open;
            if (FailNext is { } failure)
            {
                FailNext = null;
                throw failure;
            }
            Interlocked.Increment(ref _applied);
            return await inner.ApplyAsync(change, cancellationToken);
        }

        public Task<StoreSnapshot> LoadAsync(CancellationToken cancellationToken) => inner.LoadAsync(cancellationToken);

        public Task<IReadOnlyList<StoredEvent>> EventsAsync(ulong cacheId, long fromSequence, CancellationToken cancellationToken) =>
            inner.EventsAsync(cacheId, fromSequence, cancellationToken);

        public Task<CompactionResult> CompactEventsAsync(DateTimeOffset olderThan, int perCacheCap, CancellationToken cancellationToken) =>
            inner.CompactEventsAsync(olderThan, perCacheCap, cancellationToken);

        public Task<long> EventFloorAsync(ulong cacheId, CancellationToken cancellationToken) => inner.EventFloorAsync(cacheId, cancellationToken);

        public Task<IReadOnlyList<JoinTokenRecord>> JoinTokensAsync(CancellationToken cancellationToken) => inner.JoinTokensAsync(cancellationToken);

        public Task<bool> PingAsync(CancellationToken cancellationToken) => inner.PingAsync(cancellationToken);

        public ValueTask DisposeAsync() => inner.DisposeAsync();

        private static TaskCompletionSource Opened()
        {
            var open = new TaskCompletionSource();
            open.SetResult();
            return open;
        }
    }
}
