using System.Collections;
using System.Collections.Generic;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.Reflection;
using Grpc.Core;
using Grpc.Core.Interceptors;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Services;

/// <summary>
/// Bounds every string, repeated field and map of every request before a service sees it, walking the message by
/// reflection so that a field added to the contract is bounded too. A request past a bound is refused with
/// INVALID_ARGUMENT naming the field, its length and the bound, and quoting at most <see cref="Input.QuotedChars"/>
/// characters of it (a refusal's status message travels in a header, so an echoed megabyte would fail as
/// RESOURCE_EXHAUSTED at the client instead). Whole messages are bounded by <see cref="MaxMessageBytes"/>.
/// </summary>
public sealed class InputBoundsInterceptor : Interceptor
{
    /// <summary>
    /// The largest request message the manager reads (gRPC's usual 4 MiB, stated here): a larger one is refused as
    /// RESOURCE_EXHAUSTED by gRPC itself; below it, an overlong field is refused by name as INVALID_ARGUMENT.
    /// </summary>
    public const int MaxMessageBytes = 4 * 1024 * 1024;

    // Fields whose bound is not the default, by full name.
    private static readonly Dictionary<string, int> s_stringBounds = new()
    {
        ["remotecache.manager.v1.AllocateRequest.name"] = ContractLimits.MaxNameLength,
        ["remotecache.manager.v1.AllocateRequest.request_id"] = ContractLimits.MaxRequestIdLength,
        ["remotecache.manager.v1.ReplacementRequest.mover"] = ContractLimits.MaxMoverLength,
        ["remotecache.manager.v1.MoveRegionRequest.mover"] = ContractLimits.MaxMoverLength,
    };

    public override Task<TResponse> UnaryServerHandler<TRequest, TResponse>(TRequest request, ServerCallContext context,
                                                                           UnaryServerMethod<TRequest, TResponse> continuation)
    {
        Check(request);
        return continuation(request, context);
    }

    public override Task ServerStreamingServerHandler<TRequest, TResponse>(TRequest request, IServerStreamWriter<TResponse> responseStream,
                                                                           ServerCallContext context, ServerStreamingServerMethod<TRequest, TResponse> continuation)
    {
        Check(request);
        return continuation(request, responseStream, context);
    }

    /// <summary>Throws an INVALID_ARGUMENT <see cref="RpcException"/> for the first field of <paramref name="request"/> past its bound.</summary>
    public static void Check(object request)
    {
        if (request is IMessage message && Problem(message, message.Descriptor.Name) is { } problem)
            throw new RpcException(new Status(StatusCode.InvalidArgument, problem));
    }

    private static string? Problem(IMessage message, string path)
    {
        foreach (var field in message.Descriptor.Fields.InFieldNumberOrder())
        {
            object? value = field.Accessor.GetValue(message);
            string name = $"{path}.{field.Name}";
            if (field.IsMap)
            {
                var map = (IDictionary)value!;
                if (map.Count > ContractLimits.MaxElements)
                    return $"{name} has {map.Count} entries; at most {ContractLimits.MaxElements} are allowed";
                foreach (DictionaryEntry entry in map)
                    if ((Problem(field.MessageType.FindFieldByNumber(1), entry.Key, $"{name} key") ??
                         Problem(field.MessageType.FindFieldByNumber(2), entry.Value, $"{name}[{Input.Quote(entry.Key.ToString() ?? "")}]")) is { } problem)
                        return problem;
            }
            else if (field.IsRepeated)
            {
                var list = (IList)value!;
                if (list.Count > ContractLimits.MaxElements)
                    return $"{name} has {list.Count} elements; at most {ContractLimits.MaxElements} are allowed";
                for (int i = 0; i < list.Count; i++)
                    if (Problem(field, list[i], $"{name}[{i}]") is { } problem)
                        return problem;
            }
            else if (Problem(field, value, name) is { } problem)
            {
                return problem;
            }
        }
        return null;
    }

    private static string? Problem(FieldDescriptor field, object? value, string name)
    {
        if (value is IMessage nested)
            return Problem(nested, name);
        if (value is not string text)
            return null;
        int bound = s_stringBounds.GetValueOrDefault(field.FullName, ContractLimits.MaxStringLength);
        return text.Length > bound ? $"{name} is {text.Length} characters, longer than the {bound} allowed: {Input.Quote(text)}" : null;
    }
}
