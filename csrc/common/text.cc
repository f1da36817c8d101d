#include "common/text.h"

namespace rdmacoll {

std::string printableUtf8(const char* s, size_t n) {
  static const char kReplacement[] = "\xef\xbf\xbd";
  std::string o;
  size_t i = 0;
  while (i < n && s[i] != 0) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && len == 2) ok = c >= 0xc2;  // no overlong forms
    if (ok && len == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogates
    }
    if (ok && len == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = c <= 0xf4 && !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (ok && len == 1 && (c < 0x20 || c == 0x7f)) ok = false;
    if (ok) {
      o.append(s + i, len);
      i += len;
    } else {
      o += kReplacement;
      ++i;
    }
  }
  return o;
}

}  // namespace rdmacoll
