using System;
using System.CommandLine;
using System.CommandLine.Invocation;
using System.IO;
using System.Linq;

namespace RemoteCache.Cli.Slo;

/// <summary>Exit codes of <c>remotecache slo search</c> and <c>remotecache slo bench</c>.</summary>
internal static class SloExitCodes
{
    /// <summary>A configuration meets the SLO (search), or the benchmark ran.</summary>
    public const int Success = 0;

    /// <summary>Bad arguments, or a model file that cannot be read or is not valid: nothing was searched.</summary>
    public const int UsageOrModelError = 2;

    /// <summary>The search ran and no configuration of the model is predicted to meet the SLO.</summary>
    public const int NotMet = 3;
}

/// <summary>
/// The action of the slo commands: it runs even when parsing failed (<see cref="ClearsParseErrors"/>), so that every
/// refusal of these commands, the parser's (a number that is not one, a missing option, an unknown token) and their
/// own (a model file that is not valid, a record size that is not the model's), exits with
/// <see cref="SloExitCodes.UsageOrModelError"/> rather than System.CommandLine's 1.
/// </summary>
internal sealed class SloCommandAction : SynchronousCommandLineAction
{
    private readonly string _name;
    private readonly Func<ParseResult, TextWriter, int> _run;

    public SloCommandAction(string name, Func<ParseResult, TextWriter, int> run)
    {
        _name = name;
        _run = run;
    }

    public override bool ClearsParseErrors => true;

    public override int Invoke(ParseResult parseResult)
    {
        var error = parseResult.InvocationConfiguration.Error;
        if (ParseProblems.Report(parseResult, _name, error))
            return SloExitCodes.UsageOrModelError;
        try
        {
            return _run(parseResult, parseResult.InvocationConfiguration.Output);
        }
        catch (UsageException e)
        {
            error.WriteLine($"{_name}: {e.Message}");
            return SloExitCodes.UsageOrModelError;
        }
    }
}

/// <summary>The parser's refusals (errors and unmatched tokens), for actions that run although parsing failed.</summary>
internal static class ParseProblems
{
    /// <summary>Prints each as "NAME: problem" and a pointer to --help; true if there was any.</summary>
    public static bool Report(ParseResult parseResult, string name, TextWriter error)
    {
        var problems = parseResult.Errors.Select(e => e.Message)
            .Concat(parseResult.UnmatchedTokens.Select(t => $"Unrecognized command or argument '{t}'."))
            .Distinct()
            .ToList();
        foreach (var problem in problems)
            error.WriteLine($"{name}: {problem}");
        if (problems.Count > 0)
            error.WriteLine($"(see {name} --help)");
        return problems.Count > 0;
    }
}

/// <summary>A refusal of the command's arguments or model: printed, exit code <see cref="SloExitCodes.UsageOrModelError"/>.</summary>
internal sealed class UsageException : Exception
{
    public UsageException(string message, Exception? inner = null)
        : base(message, inner)
    {
    }
}
