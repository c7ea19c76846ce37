using System.Collections.Generic;
using System.Threading.Channels;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Core;

/// <summary>Live events to the watchers of each cache (the store keeps them for watchers that come later).</summary>
public sealed class EventHub
{
    private readonly object _gate = new();
    private readonly Dictionary<ulong, List<Channel<StoredEvent>>> _watchers = new();

    /// <summary>A channel that receives every event of <paramref name="cacheId"/> published from now on.</summary>
    public Channel<StoredEvent> Subscribe(ulong cacheId)
    {
        // Bounded so that a watcher that stops reading cannot hold the manager's memory; it is then cut off and
        // resumes from the store with its last sequence.
        var channel = Channel.CreateBounded<StoredEvent>(new BoundedChannelOptions(1024) { FullMode = BoundedChannelFullMode.Wait });
        lock (_gate)
        {
            if (!_watchers.TryGetValue(cacheId, out var list))
                _watchers[cacheId] = list = new List<Channel<StoredEvent>>();
            list.Add(channel);
        }
        return channel;
    }

    public void Unsubscribe(ulong cacheId, Channel<StoredEvent> channel)
    {
        lock (_gate)
        {
            if (_watchers.TryGetValue(cacheId, out var list) && list.Remove(channel) && list.Count == 0)
                _watchers.Remove(cacheId);
        }
    }

    /// <summary>Hands committed events to their watchers; a watcher too far behind is completed (it resumes from the store).</summary>
    public void Publish(IEnumerable<StoredEvent> events)
    {
        lock (_gate)
        {
            foreach (var e in events)
            {
                if (!_watchers.TryGetValue(e.CacheId, out var list))
                    continue;
                foreach (var channel in list)
                    if (!channel.Writer.TryWrite(e))
                        channel.Writer.TryComplete(new ManagerRefusal(RefusalKind.ResourceExhausted,
                            $"the watcher fell more than 1024 events behind; watch again from sequence {e.Sequence}"));
            }
        }
    }

    /// <summary>Watchers right now (a metric).</summary>
    public int Count
    {
        get
        {
            lock (_gate)
            {
                int n = 0;
                foreach (var list in _watchers.Values)
                    n += list.Count;
                return n;
            }
        }
    }
}
