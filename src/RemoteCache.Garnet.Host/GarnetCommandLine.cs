using System;
using System.Collections.Generic;
using System.Reflection;
using Garnet;
using Garnet.server;
using Microsoft.Extensions.Logging;

namespace RemoteCache.Garnet.Host;

/// <summary>
/// Garnet's own command line (everything garnet-server accepts: options, --config-import-path, defaults.conf), parsed by
/// Garnet itself into the options its server takes. Garnet keeps its parser internal (Garnet.ServerSettingsManager and
/// Garnet.Options in Garnet.host) and builds the server inside the constructor that takes a command line, where no device
/// factory can be given; so the parser is reached by reflection, against the Garnet version this tool is built with.
/// </summary>
internal static class GarnetCommandLine
{
    private const string ParserType = "Garnet.ServerSettingsManager";
    private const string ParseMethod = "TryParseCommandLineArguments";
    private const string ToServerOptions = "GetServerOptions";

    /// <summary>What parsing Garnet's arguments gave.</summary>
    /// <param name="Options">The server's options (null when parsing failed or only asked for help or the version).</param>
    /// <param name="ExitGracefully">Garnet printed what was asked (--help, --version): nothing to run.</param>
    /// <param name="Invalid">The options Garnet rejected.</param>
    internal sealed record Parsed(GarnetServerOptions? Options, bool ExitGracefully, IReadOnlyList<string> Invalid);

    /// <summary>Parses <paramref name="args"/> as garnet-server would.</summary>
    /// <exception cref="InvalidOperationException">This Garnet's parser is not where this tool was built to find it.</exception>
    public static Parsed Parse(string[] args, ILoggerFactory loggers)
    {
        var host = typeof(GarnetServer).Assembly;
        var method = host.GetType(ParserType)?.GetMethod(ParseMethod, BindingFlags.NonPublic | BindingFlags.Public | BindingFlags.Static);
        if (method is null || method.GetParameters().Length != 7)
            throw new InvalidOperationException(
                $"remotecache-garnet reads Garnet's command line as Microsoft.Garnet {SupportedGarnet} parses it; the Garnet here " +
                $"({host.GetName().Version}) has no {ParserType}.{ParseMethod} of that shape");
        // (args, out options, out invalidOptions, out optionsJson, out exitGracefully, silentMode, logger)
        object?[] call = { args, null, null, null, null, false, loggers.CreateLogger("Garnet") };
        bool parsed = (bool)method.Invoke(null, call)!;
        bool exitGracefully = call[4] is true;
        var invalid = (IReadOnlyList<string>?)(call[2] as List<string>) ?? Array.Empty<string>();
        if (!parsed || call[1] is not { } options)
            return new Parsed(null, exitGracefully, invalid);
        var toServer = options.GetType().GetMethod(ToServerOptions, new[] { typeof(ILogger) })
            ?? throw new InvalidOperationException($"Garnet's parsed options have no {ToServerOptions}(ILogger) (Microsoft.Garnet {host.GetName().Version})");
        var server = (GarnetServerOptions)toServer.Invoke(options, new object?[] { loggers.CreateLogger("Options") })!;
        return new Parsed(server, exitGracefully, invalid);
    }

    /// <summary>The Microsoft.Garnet line whose internal parser this reaches (the package version is pinned in Directory.Packages.props).</summary>
    public const string SupportedGarnet = "2.2";
}
