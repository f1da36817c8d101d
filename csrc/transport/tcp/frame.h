// The tcp transport's wire format and its receive-side parser.
//
// A connection carries frames, each a 32-byte header followed by its payload:
//
//   kWrite  {region, offset, length, imm?}  + length payload bytes, which the parser lands
//           straight in the registered region at offset (no staging copy), then reports
//           the immediate (flag kHasImm). Ordering is the stream's: an immediate is
//           reported only after every earlier frame's payload is in memory.
//   kPut64  {region, offset, value}          no payload; the parser stores the 8-byte value
//           at region+offset with one atomic release store (never torn).
//   kBye    all fields 0                     the sender left (its endpoint was destroyed):
//           later writes to it may be dropped; nothing may follow on the stream.
//
// FrameParser is pure: no sockets, no threads. Its user asks where the next bytes go
// (next(): the header buffer or a slice of a registered region), puts up to that many
// bytes there (recv, or memcpy in the fuzz test), and reports them (advance()). Every
// header is validated before a single payload byte is placed: a bad magic, type, flag
// or reserved field, an unknown region, a range outside the region's bounds (overflow-
// safe), a misaligned put64 all fail the frame, and a failed parser stays failed (the
// connection is then closed). A target never leaves [base, base+len) of the region
// named by the validated header.
//
// Byte order: the host's (all hosts of one job are assumed to share it; the handshake
// checks the magic, which would not match across byte orders).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace rdmacoll {
namespace transport {
namespace tcp {

constexpr uint32_t kFrameMagic = 0x31464352;  // "RCF1" in memory on little-endian hosts
enum FrameType : uint8_t { kWrite = 1, kPut64 = 2, kBye = 3 };
enum FrameFlags : uint8_t { kHasImm = 1 };

struct FrameHeader {
  uint32_t magic;
  uint8_t type;
  uint8_t flags;
  uint16_t reserved;  // 0
  uint32_t region;
  uint32_t imm;
  uint64_t offset;
  uint64_t length;  // payload bytes (kWrite) or the value (kPut64)
};
static_assert(sizeof(FrameHeader) == 32, "the frame header is 32 bytes on the wire");

FrameHeader writeHeader(uint32_t region, uint64_t offset, uint64_t length, bool hasImm, uint32_t imm);
FrameHeader put64Header(uint32_t region, uint64_t offset, uint64_t value);
FrameHeader byeHeader();

// A registered region as the parser sees it; `keep` holds library-owned memory alive
// while a payload is landing in it.
struct RegionRef {
  char* base = nullptr;
  size_t len = 0;
  std::shared_ptr<void> keep;
};

class RegionLookup {
 public:
  virtual ~RegionLookup() = default;
  // False when no region has this id.
  virtual bool find(uint32_t id, RegionRef* out) = 0;
};

class FrameParser {
 public:
  enum class Event { kNone, kImmediate, kPut, kBye, kError };
  struct Target {
    char* dst;
    size_t len;    // > 0
    bool payload;  // inside the region of the current frame (else the header buffer)
  };

  explicit FrameParser(RegionLookup* regions) : regions_(regions) {}

  // Where the next bytes of the stream go. Not valid after an error.
  Target next();
  // n (1..next().len) bytes were placed at next().dst. Returns the event the bytes
  // completed: kImmediate (*imm set), kPut (a put64 was stored), kBye, kError (see
  // error()), or kNone.
  Event advance(size_t n, uint32_t* imm);
  // Convenience for buffered bytes (and the fuzz test): places up to n bytes from p
  // through next()/advance(), stopping after the first event other than kNone. Returns
  // the bytes consumed.
  size_t feed(const char* p, size_t n, Event* ev, uint32_t* imm);

  bool failed() const { return state_ == State::kFailed; }
  // True between frames: an EOF here is clean, elsewhere the stream was truncated.
  bool atFrameBoundary() const { return state_ == State::kHeader && have_ == 0; }
  const std::string& error() const { return error_; }
  uint64_t frames() const { return frames_; }

 private:
  enum class State { kHeader, kPayload, kFailed };
  bool bye_ = false;  // a goodbye arrived: any further frame is an error
  Event onHeader(uint32_t* imm);
  Event fail(const std::string& why);

  RegionLookup* regions_;
  State state_ = State::kHeader;
  alignas(8) char buf_[sizeof(FrameHeader)];
  size_t have_ = 0;    // header bytes so far
  FrameHeader h_{};    // the validated header of the frame in progress
  RegionRef region_;   // its region
  uint64_t left_ = 0;  // payload bytes still to come
  uint64_t frames_ = 0;
  std::string error_;
};

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
