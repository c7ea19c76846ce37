using System;
using Microsoft.Extensions.Logging;

namespace RemoteCache;

/// <summary>
/// The application's logger factory as the gRPC channels see it: warnings and errors only. gRPC logs every call that ends
/// with an error status at Information (the event stream cancelled when a cache closes, each replica that refused during a
/// failover); the client logs what matters of those itself, with the cache and the call named.
/// </summary>
internal sealed class WarningsOnlyLoggerFactory(ILoggerFactory inner) : ILoggerFactory
{
    public ILogger CreateLogger(string categoryName) => new WarningsOnly(inner.CreateLogger(categoryName));

    public void AddProvider(ILoggerProvider provider) => inner.AddProvider(provider);

    public void Dispose()
    {
        // The application's factory: the application disposes it.
    }

    private sealed class WarningsOnly(ILogger inner) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => inner.BeginScope(state);

        public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Warning && inner.IsEnabled(logLevel);

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
        {
            if (IsEnabled(logLevel))
                inner.Log(logLevel, eventId, state, exception, formatter);
        }
    }
}
