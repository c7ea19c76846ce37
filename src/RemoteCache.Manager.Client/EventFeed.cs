using System.Collections.Generic;
using System.Threading.Tasks;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Channels;

namespace RemoteCache;

/// <summary>
/// A cache's events for any number of readers: each enumeration gets the events kept so far, then live ones, until
/// the feed completes.
/// </summary>
internal sealed class EventFeed : IAsyncEnumerable<ManagedCacheEvent>
{
    // Events kept for readers that start late, and unread events a reader may hold before it loses the oldest.
    internal const int Kept = 1024;

    private readonly object _gate = new();
    private readonly Queue<ManagedCacheEvent> _kept = new();
    private readonly List<Channel<ManagedCacheEvent>> _readers = new();
    private bool _completed;

    public void Publish(ManagedCacheEvent e)
    {
        lock (_gate)
        {
            if (_completed)
                return;
            if (_kept.Count == Kept)
                _kept.Dequeue();
            _kept.Enqueue(e);
            foreach (var reader in _readers)
                reader.Writer.TryWrite(e);
        }
    }

    public void Complete()
    {
        lock (_gate)
        {
            _completed = true;
            foreach (var reader in _readers)
                reader.Writer.TryComplete();
            _readers.Clear();
        }
    }

    public IAsyncEnumerator<ManagedCacheEvent> GetAsyncEnumerator(CancellationToken cancellationToken = default) =>
        ReadAsync(cancellationToken).GetAsyncEnumerator(cancellationToken);

    private async IAsyncEnumerable<ManagedCacheEvent> ReadAsync([EnumeratorCancellation] CancellationToken cancellationToken)
    {
        var channel = Channel.CreateBounded<ManagedCacheEvent>(new BoundedChannelOptions(Kept) { FullMode = BoundedChannelFullMode.DropOldest, SingleReader = true });
        lock (_gate)
        {
            foreach (var e in _kept)
                channel.Writer.TryWrite(e);
            if (_completed)
                channel.Writer.TryComplete();
            else
                _readers.Add(channel);
        }
        try
        {
            await foreach (var e in channel.Reader.ReadAllAsync(cancellationToken).ConfigureAwait(false))
                yield return e;
        }
        finally
        {
            lock (_gate)
                _readers.Remove(channel);
        }
    }
}
