#include "transport/connect_codec.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace rc::transport {
namespace {

std::vector<std::byte> frame_of(wire::Kind kind, std::span<const std::byte> payload, std::size_t trailer_bytes = 0) {
  std::vector<std::byte> out(sizeof(wire::FrameHeader) + payload.size() + trailer_bytes);
  const wire::FrameHeader h{wire::kMagic, wire::kVersion, static_cast<uint8_t>(kind), 0,
                            static_cast<uint32_t>(out.size()), 0, 0};
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, payload.data(), payload.size());
  return out;
}

template <typename T>
std::span<const std::byte> bytes_of(const T& value) {
  return {reinterpret_cast<const std::byte*>(&value), sizeof value};
}

template <std::size_t N>
void copy_message(char (&field)[N], std::string_view text) {
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  field[n] = '\0';
}

}  // namespace

std::vector<std::byte> encode_connect_request(const wire::ConnectRequest& request) {
  return frame_of(wire::Kind::Connect, bytes_of(request));
}

Status decode_connect_request(std::span<const std::byte> frame, wire::ConnectRequest& out) {
  if (frame.size() < sizeof(wire::FrameHeader)) return fail(RC_E_PROTOCOL, "the first message is shorter than a frame header");
  const auto h = wire::read_header(frame.data());
  if (h.magic == wire::kMagic && h.version != wire::kVersion)
    return fail(RC_E_PROTOCOL, "the client speaks wire version " + std::to_string(h.version) + ", this server " +
                                   std::to_string(wire::kVersion));
  if (frame.size() != sizeof(wire::FrameHeader) + sizeof out || !wire::header_ok(h, wire::Kind::Connect, frame.size()) ||
      h.bytes != frame.size())
    return fail(RC_E_PROTOCOL, "the first message is not a Connect frame");
  std::memcpy(&out, frame.data() + sizeof h, sizeof out);
  if (out.token_length > wire::kTokenMax) return fail(RC_E_PROTOCOL, "the Connect's token length is out of range");
  if (out.capability_length != 0 && out.capability_length != sizeof(wire::Capability))
    return fail(RC_E_PROTOCOL, "the Connect's capability length is neither 0 nor a capability's");
  return RC_OK;
}

std::vector<std::byte> encode_connect_reply(const Grant& grant, std::span<const wire::RegionDescriptor> regions) {
  wire::ConnectReply reply{};
  reply.status = grant.status;
  reply.region_count = static_cast<uint32_t>(regions.size());
  reply.region_size = grant.region_size;
  reply.max_frame = wire::kMaxFrame;
  reply.flags = grant.status == RC_OK && grant.read_only ? wire::kReplyReadOnly : 0;
  copy_message(reply.message, grant.message);
  auto out = frame_of(wire::Kind::ConnectReply, bytes_of(reply), regions.size_bytes());
  if (!regions.empty()) std::memcpy(out.data() + sizeof(wire::FrameHeader) + sizeof reply, regions.data(), regions.size_bytes());
  return out;
}

Status decode_connect_reply(std::span<const std::byte> frame, wire::ConnectReply& out,
                            std::vector<wire::RegionDescriptor>& regions) {
  if (frame.size() < sizeof(wire::FrameHeader) + sizeof out) return fail(RC_E_PROTOCOL, "Connect reply too short");
  const auto h = wire::read_header(frame.data());
  if (h.magic == wire::kMagic && h.version != wire::kVersion)
    return fail(RC_E_PROTOCOL, "the server speaks wire version " + std::to_string(h.version) + ", this client " +
                                   std::to_string(wire::kVersion));
  if (!wire::header_ok(h, wire::Kind::ConnectReply, frame.size()) || h.bytes != frame.size())
    return fail(RC_E_PROTOCOL, "Connect reply has a bad header");
  std::memcpy(&out, frame.data() + sizeof h, sizeof out);
  out.message[sizeof out.message - 1] = '\0';
  if (out.status != RC_OK) {
    // Range-check the peer's integer before it becomes an enum value.
    return fail(is_known_status(out.status) ? static_cast<Status>(out.status) : RC_E_PROTOCOL,
                std::string("server refused the connection: ") + out.message);
  }
  const std::size_t expected = sizeof h + sizeof out + std::size_t{out.region_count} * sizeof(wire::RegionDescriptor);
  if (frame.size() != expected || out.region_count == 0 || out.region_size == 0)
    return fail(RC_E_PROTOCOL, "Connect reply region list does not match its count");
  regions.resize(out.region_count);
  std::memcpy(regions.data(), frame.data() + sizeof h + sizeof out, regions.size() * sizeof(wire::RegionDescriptor));
  return RC_OK;
}

std::vector<std::byte> encode_notice(Status status, std::string_view message) {
  wire::Notice notice{};
  notice.status = status;
  copy_message(notice.message, message);
  return frame_of(wire::Kind::Notice, bytes_of(notice));
}

Status decode_notice(std::span<const std::byte> frame) {
  wire::Notice notice{};
  if (frame.size() != sizeof(wire::FrameHeader) + sizeof notice) return fail(RC_E_PROTOCOL, "a Notice of the wrong size");
  const auto h = wire::read_header(frame.data());
  if (!wire::header_ok(h, wire::Kind::Notice, frame.size()) || h.bytes != frame.size())
    return fail(RC_E_PROTOCOL, "a Notice with a bad header");
  std::memcpy(&notice, frame.data() + sizeof h, sizeof notice);
  notice.message[sizeof notice.message - 1] = '\0';
  if (notice.status == RC_OK || !is_known_status(notice.status))
    return fail(RC_E_PROTOCOL, "a Notice with an unknown status");
  return fail(static_cast<Status>(notice.status), std::string("the server closed the connection: ") + notice.message);
}

}  // namespace rc::transport
