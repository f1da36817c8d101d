#include "comm/call.h"

#include <sstream>

#include "common/text.h"

namespace rdmacoll {

namespace {
inline uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix-style mixing; any change of any field changes the hash.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}
}  // namespace

uint64_t hashDescriptor(const Descriptor& d) {
  uint64_t h = 0x5244434f4c4cULL;
  h = mix(h, d.collective);
  h = mix(h, d.seq);
  h = mix(h, d.dtype);
  h = mix(h, d.count);
  h = mix(h, d.op);
  h = mix(h, static_cast<uint64_t>(static_cast<int64_t>(d.root)));
  h = mix(h, d.nameHash);
  h = mix(h, d.shapeHash);
  h = mix(h, d.algorithm);
  h = mix(h, d.segmentBytes);
  return h;
}

uint32_t hashShape(const int64_t* dims, size_t n) {
  uint64_t h = mix(0x5348415045ULL, n);
  for (size_t i = 0; i < n; ++i) h = mix(h, static_cast<uint64_t>(dims[i]));
  // never 0 (0 means unchecked): a shape always differs from "no shape"
  const uint32_t folded = static_cast<uint32_t>(h ^ (h >> 32));
  return folded ? folded : 1;
}

std::string describeShape(const Shape& s) {
  if (s.ndims < 0) return "";
  std::string t = " with shape [";
  for (int i = 0; i < s.ndims; ++i) t += (i ? ", " : "") + (i < s.skip ? std::string("*") : std::to_string(s.dims[i]));
  return t + "]";
}

std::string describeCall(const Descriptor& d) {
  std::ostringstream o;
  o << collectiveName(static_cast<Collective>(d.collective)) << "(#" << d.seq << ", count=" << d.count
    << ", dtype=" << dtypeName(static_cast<DataType>(d.dtype)) << ", op=" << opName(static_cast<ReduceOp>(d.op));
  if (d.root >= 0) o << ", root=" << d.root;
  // (the name: cut at a fixed length, and from a peer: made valid text)
  if (d.name[0]) o << ", name='" << printableUtf8(d.name, sizeof(d.name)) << "'";
  o << ")";
  return o.str();
}

}  // namespace rdmacoll
