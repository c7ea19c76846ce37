using System.CommandLine;
using System.Net;
using System.Net.Sockets;

namespace RemoteCache.Cli.Slo;

/// <summary>
/// <c>--verbs-address IP</c> of the commands that run remotecache-bench: over verbs, its server binds (rdma_cm) to an
/// RDMA device's interface; loopback has no RDMA device.
/// </summary>
internal static class VerbsAddressOption
{
    public static Option<string?> Create()
    {
        var option = new Option<string?>("--verbs-address")
        {
            Description = "With a verbs model: the IPv4 address of an RDMA device's interface (rdma_cm binds the bench's server to it; " +
                          "client and server share this host, so it measures the device's loopback path)",
            HelpName = "IP",
        };
        option.Validators.Add(r =>
        {
            if (r.GetValueOrDefault<string?>() is { } a && !(IPAddress.TryParse(a, out var ip) && ip.AddressFamily == AddressFamily.InterNetwork))
                r.AddError($"--verbs-address {a} is not an IPv4 address");
        });
        return option;
    }

    /// <summary>The refusal when verbs and the address do not go together, or null.</summary>
    /// <param name="verbs">What is measured runs over verbs.</param>
    /// <param name="what">How the command names that: "--transport verbs", "a verbs model".</param>
    public static string? Mismatch(bool verbs, string? address, string what) => verbs == (address is not null)
        ? null
        : verbs
            ? $"{what} needs --verbs-address (the IPv4 address of an RDMA device's interface)"
            : $"--verbs-address is only for {what}";
}
