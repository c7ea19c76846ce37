using System;
using System.Security.Cryptography;
using System.Text;

namespace RemoteCache.Manager.V1;

/// <summary>The MAC of a joined server's heartbeat (HeartbeatRequest.mac), computed the one way both ends compute it.</summary>
public static class HeartbeatMac
{
    private static readonly byte[] s_label = Encoding.UTF8.GetBytes("remotecache heartbeat v1\0");

    /// <summary>HMAC-SHA256 under the server's <paramref name="key"/> of the label, a zero byte, <paramref name="serverId"/>, a zero byte, then <paramref name="body"/>.</summary>
    public static byte[] Compute(byte[] key, string serverId, ReadOnlySpan<byte> body)
    {
        byte[] id = Encoding.UTF8.GetBytes(serverId);
        var message = new byte[s_label.Length + id.Length + 1 + body.Length];
        s_label.CopyTo(message, 0);
        id.CopyTo(message, s_label.Length);
        body.CopyTo(message.AsSpan(s_label.Length + id.Length + 1));
        return HMACSHA256.HashData(key, message);
    }
}
