using System;
using System.Security.Claims;
using System.Text.Encodings.Web;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Authentication;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace RemoteCache.Manager.Security;

/// <summary>
/// ASP.NET Core authentication by API key: <c>authorization: Bearer &lt;key&gt;</c>. The principal carries the tenant
/// (<see cref="ClaimTypes.Name"/>) and its roles; authorization policies check the roles per service.
/// </summary>
public sealed class ApiKeyAuthenticationHandler : AuthenticationHandler<AuthenticationSchemeOptions>
{
    /// <summary>The scheme's name.</summary>
    public const string SchemeName = "ApiKey";

    /// <summary>Characters of an API key at most (generated ones have 36); a longer one is refused unread.</summary>
    public const int MaxKeyChars = 256;

    /// <summary>Bytes of request headers the manager reads (and refuses by name) before HTTP/2 gives up on the connection.</summary>
    public const int MaxHeaderBytes = 1 << 20;

    private readonly ApiKeyStore _keys;

    public ApiKeyAuthenticationHandler(IOptionsMonitor<AuthenticationSchemeOptions> options, ILoggerFactory logger, UrlEncoder encoder, ApiKeyStore keys)
        : base(options, logger, encoder)
    {
        _keys = keys;
    }

    protected override Task<AuthenticateResult> HandleAuthenticateAsync()
    {
        string? header = Request.Headers.Authorization;
        // Servers joining present a join token there, which their service checks itself; an API key means nothing to it.
        if (string.IsNullOrEmpty(header) || Request.Path.StartsWithSegments("/" + V1.ServerMembership.Descriptor.FullName))
            return Task.FromResult(AuthenticateResult.NoResult());
        const string bearer = "Bearer ";
        if (header.Length > bearer.Length + MaxKeyChars)
            return Task.FromResult(AuthenticateResult.Fail($"the authorization header is {header.Length} characters; an API key has at most {MaxKeyChars}"));
        if (!header.StartsWith(bearer, System.StringComparison.OrdinalIgnoreCase))
            return Task.FromResult(AuthenticateResult.Fail("the authorization header is not 'Bearer <api key>'"));
        var key = _keys.Find(header[bearer.Length..].Trim());
        if (key is null)
            return Task.FromResult(AuthenticateResult.Fail("the API key is not known to this manager"));
        var identity = new ClaimsIdentity(SchemeName);
        identity.AddClaim(new Claim(ClaimTypes.Name, key.Tenant));
        foreach (string role in key.Roles)
            identity.AddClaim(new Claim(ClaimTypes.Role, role));
        return Task.FromResult(AuthenticateResult.Success(new AuthenticationTicket(new ClaimsPrincipal(identity), SchemeName)));
    }

    // gRPC clients see an HTTP 401/403 only as a bare "bad response"; a trailers-only gRPC status says what was refused and why.
    protected override async Task HandleChallengeAsync(AuthenticationProperties properties)
    {
        var result = await HandleAuthenticateOnceSafeAsync().ConfigureAwait(false);
        string why = result.Failure?.Message ?? "no API key: send 'authorization: Bearer <api key>'";
        Refuse(16 /* UNAUTHENTICATED */, $"{Request.Path} refused: {why}");
    }

    protected override Task HandleForbiddenAsync(AuthenticationProperties properties)
    {
        string role = Request.Path.StartsWithSegments("/remotecache.manager.v1.ServerPool") ? Roles.Operator : Roles.Tenant;
        Refuse(7 /* PERMISSION_DENIED */, $"{Request.Path} refused: the API key of tenant '{Context.User.Identity?.Name}' lacks the '{role}' role");
        return Task.CompletedTask;
    }

    private void Refuse(int status, string message)
    {
        Response.StatusCode = 200;
        Response.ContentType = "application/grpc";
        Response.Headers["grpc-status"] = status.ToString(System.Globalization.CultureInfo.InvariantCulture);
        Response.Headers["grpc-message"] = Uri.EscapeDataString(message);
    }
}
