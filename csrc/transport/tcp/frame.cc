#include "transport/tcp/frame.h"

#include <atomic>
#include <cstring>

namespace rdmacoll {
namespace transport {
namespace tcp {

FrameHeader writeHeader(uint32_t region, uint64_t offset, uint64_t length, bool hasImm, uint32_t imm) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = kWrite;
  h.flags = hasImm ? kHasImm : 0;
  h.region = region;
  h.imm = hasImm ? imm : 0;
  h.offset = offset;
  h.length = length;
  return h;
}

FrameHeader put64Header(uint32_t region, uint64_t offset, uint64_t value) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = kPut64;
  h.region = region;
  h.offset = offset;
  h.length = value;
  return h;
}

FrameHeader byeHeader() {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.type = kBye;
  return h;
}

FrameParser::Target FrameParser::next() {
  if (state_ == State::kPayload) {
    char* dst = region_.base + h_.offset + (h_.length - left_);
    return {dst, static_cast<size_t>(left_), true};
  }
  return {buf_ + have_, sizeof(buf_) - have_, false};
}

FrameParser::Event FrameParser::fail(const std::string& why) {
  state_ = State::kFailed;
  error_ = why;
  region_ = RegionRef();
  return Event::kError;
}

FrameParser::Event FrameParser::advance(size_t n, uint32_t* imm) {
  if (state_ == State::kFailed) return Event::kError;
  if (state_ == State::kHeader) {
    if (n == 0 || n > sizeof(buf_) - have_) return fail("parser misuse: header advance out of range");
    have_ += n;
    if (have_ < sizeof(buf_)) return Event::kNone;
    have_ = 0;
    return onHeader(imm);
  }
  if (n == 0 || n > left_) return fail("parser misuse: payload advance out of range");
  left_ -= n;
  if (left_ > 0) return Event::kNone;
  state_ = State::kHeader;
  region_ = RegionRef();
  ++frames_;
  if (h_.flags & kHasImm) {
    *imm = h_.imm;
    return Event::kImmediate;
  }
  return Event::kNone;
}

FrameParser::Event FrameParser::onHeader(uint32_t* imm) {
  std::memcpy(&h_, buf_, sizeof(h_));
  const FrameHeader& h = h_;
  if (h.magic != kFrameMagic) return fail("bad frame magic (stream out of sync or not an rdmacoll peer)");
  if (h.reserved != 0) return fail("nonzero reserved field in a frame header");
  if (bye_) return fail("a frame after the goodbye");
  if (h.type == kBye) {
    if (h.flags || h.region || h.imm || h.offset || h.length) return fail("nonzero fields in a goodbye frame");
    bye_ = true;
    ++frames_;
    return Event::kBye;
  }
  if (h.type != kWrite && h.type != kPut64) return fail("unknown frame type " + std::to_string(h.type));
  if (h.type == kPut64 ? h.flags != 0 : (h.flags & ~kHasImm) != 0) {
    return fail("unknown flags " + std::to_string(h.flags) + " in a frame header");
  }
  if (!(h.flags & kHasImm) && h.imm != 0) return fail("immediate value without the immediate flag");
  RegionRef r;
  if (!regions_->find(h.region, &r)) return fail("frame names unknown region " + std::to_string(h.region));
  const uint64_t span = h.type == kPut64 ? 8 : h.length;
  if (h.offset > r.len || span > r.len - h.offset) {
    return fail("frame of " + std::to_string(span) + " bytes at offset " + std::to_string(h.offset) +
                " is outside region " + std::to_string(h.region) + " of " + std::to_string(r.len) + " bytes");
  }
  if (h.type == kPut64) {
    char* p = r.base + h.offset;
    if (reinterpret_cast<uintptr_t>(p) % 8 != 0) {
      return fail("put64 at offset " + std::to_string(h.offset) + " is not 8-byte aligned");
    }
    reinterpret_cast<std::atomic<uint64_t>*>(p)->store(h.length, std::memory_order_release);
    ++frames_;
    return Event::kPut;
  }
  if (h.length == 0) {
    ++frames_;
    if (h.flags & kHasImm) {
      *imm = h.imm;
      return Event::kImmediate;
    }
    return Event::kNone;
  }
  region_ = std::move(r);
  left_ = h.length;
  state_ = State::kPayload;
  return Event::kNone;
}

size_t FrameParser::feed(const char* p, size_t n, Event* ev, uint32_t* imm) {
  size_t used = 0;
  *ev = Event::kNone;
  while (used < n && state_ != State::kFailed) {
    Target t = next();
    size_t k = t.len < n - used ? t.len : n - used;
    std::memcpy(t.dst, p + used, k);
    used += k;
    *ev = advance(k, imm);
    if (*ev != Event::kNone) break;
  }
  if (state_ == State::kFailed) *ev = Event::kError;
  return used;
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
