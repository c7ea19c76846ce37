// The Connect handshake's frames (Connect, ConnectReply) and the Notice a server sends before it
// closes a connection on purpose: encoding and strict decoding, shared by every transport.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "transport/transport.h"

namespace rc::transport {

std::vector<std::byte> encode_connect_request(const wire::ConnectRequest& request);
// RC_OK, or RC_E_PROTOCOL with the reason as the last error (another wire version is named).
Status decode_connect_request(std::span<const std::byte> frame, wire::ConnectRequest& out);

std::vector<std::byte> encode_connect_reply(const Grant& grant, std::span<const wire::RegionDescriptor> regions);
// The status the reply carries (its message as the last error), or RC_E_PROTOCOL when it does not
// parse.
Status decode_connect_reply(std::span<const std::byte> frame, wire::ConnectReply& out,
                            std::vector<wire::RegionDescriptor>& regions);

std::vector<std::byte> encode_notice(Status status, std::string_view message);
// The status the notice carries (never RC_OK; its message as the last error), or RC_E_PROTOCOL.
Status decode_notice(std::span<const std::byte> frame);

}  // namespace rc::transport
