// The script grammars of the structured fuzz targets, shared with fuzz-seeds so that generated
// seeds are meaningful scripts. Every step starts with a byte read as `u8() % kCount`; its
// arguments follow as documented here (Script::upto(max) reads 1, 2 or 4 bytes depending on max).
// Changing a grammar makes old corpora less useful, not wrong: every byte string is a script.
#pragma once

#include <cstdint>

namespace rc::fuzz {

// ---- fuzz-tcp-framing -------------------------------------------------------------------------
// u8 mode (% 2): 0 = FrameReader, 1 = Outbox.
//
// FrameReader: u8 config (kRd*), then steps (at most kRdMaxSteps) of:
//   AppendRaw    upto(255) n, n bytes              appended to the stream (not sent yet)
//   AppendFrame  u8 kind sel, upto(kMaxFrame+64) bytes field, u8 corruption
//                                                  a synthetic frame: header + pattern payload
//   Send         upto(0xffff) chunk-1             sends up to chunk unsent bytes (what the socket takes)
//   SendAll                                        sends what the socket takes
//   Next         u8 (bit 0: consume() afterwards)  FrameReader::next, checked against a model
//   Consume                                        FrameReader::consume
//   Shutdown                                       the sender shuts down (unsent bytes are dropped)
// then the rest is sent, the sender shuts down and next() runs until the stream ends.
enum RdConfig : uint8_t { kRdResponse = 1, kRdAllowNotice = 2, kRdSmallSocket = 4 };
enum RdStep : uint8_t { kRdAppendRaw, kRdAppendFrame, kRdSend, kRdSendAll, kRdNext, kRdConsume, kRdShutdown, kRdCount };
inline constexpr int kRdMaxSteps = 512;
// AppendFrame kind selector (% 6): Batch, Response, Notice, Connect, ConnectReply, any byte (u8).
// Corruption (% 8): 0..5 none, 6 magic, 7 version.

// Outbox: u8 socket buffer selector (% 4: default, 4 KiB, 32 KiB, 256 KiB), then steps
// (at most kObMaxSteps) of:
//   PushSmall    upto(255) n-1      pushes n bytes
//   PushFrame    upto(0xffff) n-1   pushes n bytes
//   PushBig      upto(255) n-1      pushes n * 4 KiB
//   Flush
//   Read         upto(0xffff) m-1   the peer reads up to m bytes
//   ReadAll                         the peer reads what is queued
//   ClosePeer                       the peer closes (ends the script)
// then the peer drains while the outbox flushes.
enum ObStep : uint8_t { kObPushSmall, kObPushFrame, kObPushBig, kObFlush, kObRead, kObRead2, kObReadAll, kObClosePeer, kObCount };
inline constexpr int kObMaxSteps = 1024;

// ---- fuzz-sequence ----------------------------------------------------------------------------
// u8 config (kSq*), then steps (at most kSqMaxSteps) of:
//   Built        a batch built with wire::BatchWriter:
//                  upto(15) entries-1, then per entry:
//                    u8 op sel (% 16: 0-6 Read, 7-13 Write, 14 SetServerThreads, 15 u8 raw op)
//                    upto(3) region (3 does not exist)
//                    u8 offset sel (% 4: upto(4095), size-upto(255), u64, upto(0xffff))
//                    u8 length sel (% 4: upto(64), upto(kMaxChunk), kMaxChunk, upto(kMaxChunk+100))
//                    (SetServerThreads: u16 s instead of offset and length)
//                  u8 seq sel (< 240 expected, < 248 +1, < 252 -1, < 254 zero, else u64)
//   Raw          upto(0xffff) n, u8 patch (bit 0: a valid Batch header with upto(255)+1 entries
//                and the expected seq in front), n bytes
//   Corrupt      a Built batch, then upto(0xffff) position, u8 xor
//   Send         upto(0xffff) chunk-1   sends up to chunk bytes of the stream to the server
//   Serve                               one ServerThread::serve pass (up to 8 batches)
//   ClientRead   upto(7) n-1            the client reads up to n responses
//   SetThreads   u16 s, u8 length sel (< 250: 0, else u8)   a lone SetServerThreads batch
// then everything is sent, the client end shuts down, the server runs until it stops and the
// client reads every response.
enum SqConfig : uint8_t { kSqSmallSocket = 1 };
enum SqStep : uint8_t { kSqBuilt, kSqBuilt2, kSqRaw, kSqCorrupt, kSqSend, kSqServe, kSqClientRead, kSqSetThreads, kSqCount };
inline constexpr int kSqMaxSteps = 256;

// ---- fuzz-connect -----------------------------------------------------------------------------
// u8 mode (% 4):
//   0 Raw         the rest is one frame for decode_connect_request / _reply / decode_notice
//   1 Encode      256 bytes ConnectRequest; reply: upto(31) status (-16..15), upto(127) n + n
//                 message bytes, upto(6) regions (16 bytes each), u64 region size; notice:
//                 upto(31) status, upto(127) n + n message bytes
//   2 Capability  upto(300) n + n text bytes for from_text; mint: upto(80) key length + key bytes,
//                 u64 cache id, upto(70) n + n server id bytes, u32 regions, u64 expiry; once
//                 minted (expiry > 0): upto(key length-1) key byte + u8 bit to flip in the key,
//                 upto(8) flips + upto(1151) bit each in the capability
//   3 Registry    u8 config (kRg*), upto(15) limit in regions-1, upto(15) extra 4 KiB pages,
//                 then steps (at most kRgMaxSteps) of:
//     Attach      upto(3) cache id, upto(3) token, u8 regions sel, u8 flags sel (< 150 none, < 240
//                 exclusive, < 250 migration source, else u32), upto(2) client,
//                 u8 threads, upto(7) capability sel (0 none, 1-3 minted right, 4 wrong key,
//                 5 minted + one bit flipped, 6 144 raw bytes, 7 u32 raw capability_length);
//                 minted: u8 (bit 0: another cache id, bit 1: another server, bit 2: migration
//                 rights), upto(8) regions,
//                 upto(3) expiry sel (now+1h, now-1h, 0, max); flip: upto(1151) bit;
//                 then u8 (bit 0: through encode/decode_connect_request)
//     AttachRaw   256 bytes ConnectRequest, u8 (bit 0: through the codec)
//     Detach      u8 connection
//     Expire      upto(3) now sel (now-2h, now, now+2h, max)
enum CnMode : uint8_t { kCnRaw, kCnEncode, kCnCapability, kCnRegistry, kCnCount };
enum RgConfig : uint8_t { kRgAdmission = 1, kRgOddLimit = 2, kRgCommitMemory = 4 };
enum RgStep : uint8_t { kRgAttach, kRgAttach2, kRgAttach3, kRgAttachRaw, kRgDetach, kRgDetach2, kRgExpire, kRgAttach4, kRgCount };
inline constexpr int kRgMaxSteps = 96;
// The admission key and server id of fuzz-connect's registry (seeds may carry capabilities
// minted with it).
inline constexpr char kRgServerId[] = "fuzz-server";
inline constexpr uint8_t kRgKeyByte = 0x5a;  // the key is 32 bytes of this
inline constexpr uint32_t kRgKeyBytes = 32;

// ---- fuzz-admin -------------------------------------------------------------------------------
// u8 mode (% 2):
//   0 Raw      the rest is one frame for decode_hello, decode_challenge, decode_notice and
//              admin::open (request and reply, under kAdKey's session key with zero nonces)
//   1 Session  an AdminSession (admission key kAdKey) over a Registry, then steps (at most
//              kAdMaxSteps) of:
//     Hello     u8 sel (% 4: 0-1 valid, 2 another admin version, 3 raw: upto(80) n + n bytes)
//     Request   u8 op sel (% 6: 0 op 0, 1-4 the ops, 5 u16), u8 cache id sel (% 4: 0-2 upto(7),
//               3 u64), u8 after sel (% 4: 0 zero, 1 the last serial listed, 2 upto(70), 3 u64),
//               u8 max sel (% 4: 0 zero, 1 upto(kAdminListPage), 2 kAdminListPage + upto(3), 3 u32),
//               u8 reserved sel (< 250 zero, else u32), u8 seq sel (< 230 the expected one, < 240 +1,
//               < 248 -1, < 252 zero, else u64), u8 payload sel (% 8: 0-5 exact, 6 8 bytes short,
//               7 8 bytes long), u8 seal sel (% 8: 0-4 right, 5 another key, 6 upto(bits-1) bit
//               flipped, 7 last byte cut)
//     Raw       upto(200) n + n bytes as a request frame
//     Attach    upto(7) cache id, upto(2) token: a one-region cache's connection in the registry
//     Detach    u8 connection
// The session's every answer is checked against a model of the protocol and of the registry.
enum AdMode : uint8_t { kAdModeRaw, kAdModeSession, kAdModeCount };
enum AdStep : uint8_t {
  kAdHello, kAdRequest, kAdRequest2, kAdRequest3, kAdRawFrame, kAdAttach, kAdAttach2, kAdDetach, kAdStepCount
};
inline constexpr int kAdMaxSteps = 128;
inline constexpr uint8_t kAdKeyByte = 0x6b;  // the admission key is 32 bytes of this
inline constexpr uint32_t kAdKeyBytes = 32;

// ---- fuzz-response ----------------------------------------------------------------------------
// u8 config (kRs*), upto(15) batch-1, upto(7) depth-1, then steps (at most kRsMaxSteps) of:
//   Submit     flag read, upto(2) region (2 does not exist), u8 offset sel (% 4: upto(4095),
//              65536-upto(255), u64, upto(0xffff)), u8 length sel (% 3: upto(63)+1,
//              upto(kMaxChunk-1)+1, kMaxChunk)
//   Flush, Progress
//   Respond    u8 kind (% 8: 0-2 honest, 3 honest+mutation, 4 raw, 5 notice, 6 busy, 7 error);
//              mutation: u8 sel (% 8) and its argument (see fuzz_response.cpp); raw: upto(0x1ff) n,
//              u8 (bit 0: patched header), n bytes; notice: upto(15) status, upto(127) n + n bytes;
//              error: upto(2) (DISCONNECTED, PROTOCOL, TIMEOUT)
//   Complete   upto(3) completions, u8 status sel (% 4: 0-1 OK, 2 OUT_OF_RANGE, 3 DISCONNECTED)
//   Alive      flag: the next liveness probe says DISCONNECTED
//   SendBusy   upto(3) BUSY answers to the next send_frame calls, flag: then DISCONNECTED
//   PostFail   flag: the next one-sided post fails with DISCONNECTED (else OUT_OF_RANGE)
// then the fake server answers honestly until every op completed.
enum RsConfig : uint8_t { kRsOneSided = 1, kRsPreferOneSided = 2, kRsRingPoll = 4, kRsZeroTimeout = 0x18 };
enum RsStep : uint8_t {
  kRsSubmit, kRsSubmit2, kRsSubmit3, kRsFlush, kRsProgress, kRsProgress2, kRsRespond, kRsRespond2,
  kRsComplete, kRsAlive, kRsSendBusy, kRsPostFail, kRsCount
};
inline constexpr int kRsMaxSteps = 512;
inline constexpr uint32_t kRsMaxOps = 128;

// ---- fuzz-unseal --------------------------------------------------------------------------------
// u8 mode (% 2), u8 block selector (% 3: 512, 4096, 65536 bytes), u64 block index, then:
//   Open:      the rest as a stored block (block + trailer bytes, zero past the input), opened under kUnsealKey
//              at the index: a block that fails must leave zeros; seeds hold valid sealings
//   RoundTrip: the rest as plaintext (zero past the input), sealed and opened back (must match), then
//              u32 offset (% stored size), u8 xor mask (0 -> 1): that byte of the stored block changed, opened
//              again (must fail and leave zeros)
enum UnsealMode : uint8_t { kUnsealOpen, kUnsealRoundTrip, kUnsealModeCount };
inline constexpr uint32_t kUnsealBlocks[] = {512, 4096, 65536};
inline constexpr uint8_t kUnsealKeyByte = 0x5a;  // the key: 32 bytes of it
inline constexpr uint64_t kUnsealCacheId = 0xf022;

}  // namespace rc::fuzz
