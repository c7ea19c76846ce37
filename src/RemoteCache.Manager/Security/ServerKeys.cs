using System;
using System.Security.Cryptography;
using System.Text;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Security;

/// <summary>
/// The admission key each server checks capabilities and admin sessions with. A server the manager starts or an operator
/// registers shares the manager's admission key; a server that joined by itself gets a key of its own, derived from
/// the manager's and its server id (HMAC-SHA256 under the manager's key, over a label of its own and the id), so that
/// what a joined server learns lets it admit capabilities for itself and nothing else, and no key is stored anywhere.
/// </summary>
public sealed class ServerKeys
{
    private static readonly byte[] s_joinedLabel = Encoding.UTF8.GetBytes("remotecache joined server key v1\0");

    private readonly byte[] _admissionKey;

    public ServerKeys(byte[] admissionKey) => _admissionKey = admissionKey;

    /// <summary>The key <paramref name="server"/> admits by.</summary>
    public byte[] For(ServerRecord server) => server.Join is null ? _admissionKey : Joined(server.ServerId);

    /// <summary>The key of the joined server <paramref name="serverId"/>.</summary>
    public byte[] Joined(string serverId)
    {
        byte[] id = Encoding.UTF8.GetBytes(serverId);
        var message = new byte[s_joinedLabel.Length + id.Length];
        s_joinedLabel.CopyTo(message, 0);
        id.CopyTo(message, s_joinedLabel.Length);
        return HMACSHA256.HashData(_admissionKey, message);
    }
}
