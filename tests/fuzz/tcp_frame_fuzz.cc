// Fuzz test of the tcp transport's frame parser (csrc/transport/tcp/frame.h), built and
// run by tests/test_tcp.py (with AddressSanitizer where the compiler has it).
//
//   tcp_frame_fuzz SEED CASES MAX_SECONDS
//
// Each case builds a stream of valid frames against four registered regions (one empty,
// one with a misaligned base), then maybe damages it: bit flips, hostile header fields
// (offsets and lengths at and past the bounds, 2^64-1, unknown regions, types, flags),
// truncation, splices of frames, pure garbage. The stream goes through the parser in
// random chunk sizes, as recv() would deliver it. Checked on every case:
//   - every place the parser asks bytes to be put is inside the region its frame names
//     (payload) or outside all regions (its header buffer);
//   - the events (immediates, puts, the error) and the final memory, guard bytes around
//     the regions included, equal those of an independent whole-buffer reference parser;
//   - undamaged streams parse without error and reproduce every write;
//   - a failed parser stays failed.
// Prints one line of counts; exits 1 with the seed of the first failing case.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "transport/tcp/frame.h"

using namespace rdmacoll::transport::tcp;

namespace {

constexpr size_t kGuard = 64;
constexpr int kRegions = 4;
const size_t kRegionLen[kRegions] = {0, 13, 64, 4096};
const size_t kMisalign[kRegions] = {0, 3, 0, 0};  // region 2 (id) starts misaligned

struct Arena {
  std::vector<char> bytes;
  size_t start[kRegions];  // offset of each region in bytes
  Arena() {
    size_t off = kGuard;
    for (int i = 0; i < kRegions; ++i) {
      off = (off + 7) / 8 * 8 + kMisalign[i];
      start[i] = off;
      off += kRegionLen[i] + kGuard;
    }
    bytes.assign(off + 8, static_cast<char>(0xEE));
  }
  char* base(int i) { return bytes.data() + start[i]; }
};

// Region ids 1..kRegions; 0 and others are unknown.
class Lookup : public RegionLookup {
 public:
  explicit Lookup(Arena* a) : a_(a) {}
  bool find(uint32_t id, RegionRef* out) override {
    if (id < 1 || id > kRegions) return false;
    out->base = a_->base(static_cast<int>(id - 1));
    out->len = kRegionLen[id - 1];
    out->keep = nullptr;
    return true;
  }

 private:
  Arena* a_;
};

struct Events {
  std::vector<std::string> list;  // "imm N", "put", "error"
  bool operator==(const Events& o) const { return list == o.list; }
};

// The oracle: an independent whole-buffer parser with the same rules, writing through
// bounds-checked accesses into its own arena.
Events reference(const std::vector<char>& s, Arena* a) {
  Events ev;
  size_t pos = 0;
  bool bye = false;
  while (s.size() - pos >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, s.data() + pos, sizeof(h));
    pos += sizeof(h);
    if (h.magic == kFrameMagic && h.reserved == 0 && h.type == kBye && !bye) {
      bool zero = !h.flags && !h.region && !h.imm && !h.offset && !h.length;
      ev.list.push_back(zero ? "bye" : "error");
      if (!zero) return ev;
      bye = true;
      continue;
    }
    bool ok = !bye && h.magic == kFrameMagic && h.reserved == 0 && (h.type == kWrite || h.type == kPut64);
    if (ok) ok = h.type == kPut64 ? h.flags == 0 : (h.flags & ~kHasImm) == 0;
    if (ok) ok = (h.flags & kHasImm) || h.imm == 0;
    ok = ok && h.region >= 1 && h.region <= kRegions;
    size_t rlen = ok ? kRegionLen[h.region - 1] : 0;
    uint64_t span = h.type == kPut64 ? 8 : h.length;
    // Overflow-free in a different form than the parser's: compare in 128 bits.
    ok = ok && static_cast<unsigned __int128>(h.offset) + span <= rlen;
    if (ok && h.type == kPut64) {
      size_t at = a->start[h.region - 1] + h.offset;
      ok = reinterpret_cast<uintptr_t>(a->bytes.data() + at) % 8 == 0;
      if (ok) {
        for (int i = 0; i < 8; ++i) a->bytes.at(at + i) = reinterpret_cast<const char*>(&h.length)[i];
        ev.list.push_back("put");
        continue;
      }
    }
    if (!ok) {
      ev.list.push_back("error");
      return ev;
    }
    size_t at = a->start[h.region - 1] + h.offset;
    size_t avail = s.size() - pos;
    size_t n = h.length < avail ? static_cast<size_t>(h.length) : avail;
    for (size_t i = 0; i < n; ++i) a->bytes.at(at + i) = s[pos + i];
    pos += n;
    if (n < h.length) return ev;  // truncated inside the payload
    if (h.flags & kHasImm) ev.list.push_back("imm " + std::to_string(h.imm));
  }
  return ev;
}

struct Failure {
  std::string why;
};

// The parser under test, fed in random chunks; checks every target it hands out.
Events underTest(const std::vector<char>& s, Arena* a, std::mt19937_64& rng, bool* boundary) {
  Lookup lookup(a);
  FrameParser p(&lookup);
  Events ev;
  size_t pos = 0;
  const char* lo = a->bytes.data();
  const char* hi = lo + a->bytes.size();
  while (pos < s.size()) {
    FrameParser::Target t = p.next();
    if (t.len == 0) throw Failure{"target of 0 bytes"};
    if (t.payload) {
      bool inside = false;
      for (int i = 0; i < kRegions; ++i) {
        const char* b = a->base(i);
        if (t.dst >= b && t.dst + t.len <= b + kRegionLen[i] && t.len <= kRegionLen[i]) inside = true;
      }
      if (!inside) throw Failure{"payload target outside every region"};
    } else if (t.dst + t.len > lo && t.dst < hi) {
      throw Failure{"header target inside the arena"};
    }
    size_t chunk = 1 + rng() % (rng() % 4 == 0 ? 8 : 5000);
    size_t n = std::min({chunk, t.len, s.size() - pos});
    std::memcpy(t.dst, s.data() + pos, n);
    pos += n;
    uint32_t imm = 0;
    FrameParser::Event e = p.advance(n, &imm);
    if (e == FrameParser::Event::kImmediate) ev.list.push_back("imm " + std::to_string(imm));
    if (e == FrameParser::Event::kPut) ev.list.push_back("put");
    if (e == FrameParser::Event::kBye) ev.list.push_back("bye");
    if (e == FrameParser::Event::kError) {
      ev.list.push_back("error");
      if (!p.failed() || p.error().empty()) throw Failure{"error without failed state or message"};
      uint32_t dummy;
      if (p.advance(1, &dummy) != FrameParser::Event::kError) throw Failure{"failed parser recovered"};
      break;
    }
  }
  *boundary = p.atFrameBoundary();
  return ev;
}

void appendFrame(std::vector<char>* s, const FrameHeader& h, const std::vector<char>& payload) {
  const char* hp = reinterpret_cast<const char*>(&h);
  s->insert(s->end(), hp, hp + sizeof(h));
  s->insert(s->end(), payload.begin(), payload.end());
}

// A valid stream of 1..12 frames.
std::vector<char> validStream(std::mt19937_64& rng, std::vector<size_t>* frameStarts) {
  std::vector<char> s;
  int frames = 1 + static_cast<int>(rng() % 12);
  for (int f = 0; f < frames; ++f) {
    frameStarts->push_back(s.size());
    if (f == frames - 1 && rng() % 4 == 0) {  // a goodbye ends some streams
      appendFrame(&s, byeHeader(), {});
      break;
    }
    uint32_t id = 1 + rng() % kRegions;
    size_t len = kRegionLen[id - 1];
    bool aligned = kMisalign[id - 1] == 0;
    if (rng() % 4 == 0 && aligned && len >= 8) {
      uint64_t off = (rng() % (len / 8)) * 8;
      appendFrame(&s, put64Header(id, off, rng()), {});
      continue;
    }
    uint64_t off = rng() % (len + 1);
    uint64_t n = rng() % (len - off + 1);
    std::vector<char> payload(n);
    for (auto& c : payload) c = static_cast<char>(rng());
    bool imm = rng() % 2;
    appendFrame(&s, writeHeader(id, off, n, imm, imm ? static_cast<uint32_t>(rng()) : 0), payload);
  }
  return s;
}

uint64_t hostile(std::mt19937_64& rng, uint64_t len) {
  switch (rng() % 8) {
    case 0: return len;
    case 1: return len + 1;
    case 2: return ~uint64_t(0);
    case 3: return ~uint64_t(0) - rng() % 16;
    case 4: return uint64_t(1) << (rng() % 64);
    case 5: return len ? len - 1 : 0;
    case 6: return rng();
    default: return rng() % (len + 16);
  }
}

void damage(int mode, std::vector<char>* s, const std::vector<size_t>& starts, std::mt19937_64& rng) {
  switch (mode) {
    case 1: {  // bit flips
      int flips = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < flips && !s->empty(); ++i) (*s)[rng() % s->size()] ^= static_cast<char>(1 << (rng() % 8));
      break;
    }
    case 2: {  // hostile header fields in one frame
      size_t at = starts[rng() % starts.size()];
      FrameHeader h;
      std::memcpy(&h, s->data() + at, sizeof(h));
      uint64_t rlen = (h.region >= 1 && h.region <= kRegions) ? kRegionLen[h.region - 1] : 64;
      switch (rng() % 7) {
        case 0: h.offset = hostile(rng, rlen); break;
        case 1: h.length = hostile(rng, rlen); break;
        case 2: h.offset = hostile(rng, rlen); h.length = hostile(rng, rlen); break;
        case 3: h.region = static_cast<uint32_t>(rng() % 3 == 0 ? rng() : rng() % (kRegions + 2)); break;
        case 4: h.type = rng() % 3 == 0 ? kBye : static_cast<uint8_t>(rng()); break;
        case 5: h.flags = static_cast<uint8_t>(rng()); h.imm = static_cast<uint32_t>(rng()); break;
        default: h.reserved = static_cast<uint16_t>(rng()); h.magic ^= static_cast<uint32_t>(rng() % 2); break;
      }
      std::memcpy(s->data() + at, &h, sizeof(h));
      break;
    }
    case 3:  // truncation
      s->resize(rng() % (s->size() + 1));
      break;
    case 4: {  // garbage
      s->resize(rng() % 300);
      for (auto& c : *s) c = static_cast<char>(rng());
      break;
    }
    case 5: {  // splice: cut a frame short and continue with the next
      size_t at = starts[rng() % starts.size()] + rng() % 40;
      size_t cut = rng() % 64;
      if (at < s->size()) s->erase(s->begin() + at, s->begin() + std::min(s->size(), at + cut));
      break;
    }
    default: break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SEED CASES MAX_SECONDS\n", argv[0]);
    return 2;
  }
  uint64_t seed = std::strtoull(argv[1], nullptr, 10);
  long cases = std::strtol(argv[2], nullptr, 10);
  double maxSeconds = std::strtod(argv[3], nullptr);
  auto start = std::chrono::steady_clock::now();
  long ran = 0, errors = 0, imms = 0, puts = 0, byes = 0, byMode[6] = {};
  for (long c = 0; c < cases; ++c) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > maxSeconds) break;
    uint64_t caseSeed = seed * 1000003u + static_cast<uint64_t>(c);
    std::mt19937_64 rng(caseSeed);
    std::vector<size_t> starts;
    std::vector<char> s = validStream(rng, &starts);
    int mode = static_cast<int>(rng() % 6);  // 0: undamaged
    damage(mode, &s, starts, rng);
    try {
      Arena mine, ref;
      bool boundary = false;
      Events got = underTest(s, &mine, rng, &boundary);
      Events want = reference(s, &ref);
      if (!(got == want)) {
        std::string g, w;
        for (auto& e : got.list) g += e + ";";
        for (auto& e : want.list) w += e + ";";
        throw Failure{"events differ: parser [" + g + "] reference [" + w + "]"};
      }
      if (mine.bytes != ref.bytes) throw Failure{"memory (regions or guards) differs from the reference"};
      bool failed = !got.list.empty() && got.list.back() == "error";
      if (mode == 0 && (failed || !boundary)) throw Failure{"an undamaged stream did not parse cleanly"};
      errors += failed;
      for (auto& e : got.list) {
        imms += e.rfind("imm", 0) == 0;
        puts += e == "put";
        byes += e == "bye";
      }
    } catch (const Failure& f) {
      std::printf("FAIL seed=%llu case=%ld mode=%d: %s\n", static_cast<unsigned long long>(seed), c, mode,
                  f.why.c_str());
      return 1;
    }
    ++byMode[mode];
    ++ran;
  }
  std::printf("ok cases=%ld rejected=%ld immediates=%ld puts=%ld goodbyes=%ld modes=%ld,%ld,%ld,%ld,%ld,%ld\n", ran,
              errors, imms, puts, byes, byMode[0], byMode[1], byMode[2], byMode[3], byMode[4], byMode[5]);
  return 0;
}
