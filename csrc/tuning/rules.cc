#include "tuning/rules.h"

#include <cctype>

#include "common/error.h"
#include "common/settings.h"

namespace rdmacoll {
namespace tuning {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string collectiveList() {
  std::string s;
  for (Collective c : kCollectives) s += std::string(s.empty() ? "" : ", ") + collectiveName(c);
  return s;
}

bool parseRuleSize(const std::string& text, size_t* bytes) {
  uint64_t v = 0;
  if (!settings::parseBytes(text, true, &v)) return false;
  *bytes = v == settings::kInf ? kNoLimit : static_cast<size_t>(v);
  return true;
}

bool parseRange(const std::string& text, size_t* lo, size_t* hi) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos || text.find('-', dash + 1) != std::string::npos) return false;
  if (!parseRuleSize(text.substr(0, dash), lo) || !parseRuleSize(text.substr(dash + 1), hi)) return false;
  return *lo != kNoLimit;
}

std::string sizeText(size_t n) {
  if (n == kNoLimit) return "inf";
  const char* suffix[] = {"G", "M", "K"};
  const size_t mult[] = {size_t(1) << 30, size_t(1) << 20, size_t(1) << 10};
  for (int i = 0; i < 3; ++i) {
    if (n >= mult[i] && n % mult[i] == 0) return std::to_string(n / mult[i]) + suffix[i];
  }
  return std::to_string(n);
}

}  // namespace

AlgoRules parseAlgoRules(const std::string& text, AlgorithmCheck check) {
  AlgoRules rules;
  if (trim(text).empty()) return rules;
  const std::string whole = "RDMACOLL_ALGO='" + text + "': ";
  Collective current = Collective::kAllreduce;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(",;", start);
    if (end == std::string::npos) end = text.size();
    const std::string item = trim(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) {
      throw Error(whole +
                  "an empty item (two separators in a row, or one at an end); expected items "
                  "like 'allreduce:0-64K:recursive_doubling' separated by ','");
    }
    std::vector<std::string> parts;
    for (size_t b = 0;;) {
      const size_t c = item.find(':', b);
      parts.push_back(trim(item.substr(b, c == std::string::npos ? std::string::npos : c - b)));
      if (c == std::string::npos) break;
      b = c + 1;
    }
    if (parts.size() > 3) {
      throw Error(whole + "'" + item + "' has " + std::to_string(parts.size()) +
                  " ':'-separated parts; expected [collective:][LO-HI:]algorithm");
    }
    AlgoRule rule;
    size_t at = 0;
    if (parts.size() >= 2) {
      Collective c;
      if (rdmacoll::collectiveFromName(parts[0], &c)) {
        current = c;
        ++at;
      } else if (parts.size() == 3) {
        throw Error(whole + "'" + parts[0] + "' (in '" + item + "') is not a collective; known: " + collectiveList());
      }
    }
    rule.collective = current;
    if (parts.size() - at == 2) {
      if (!parseRange(parts[at], &rule.lo, &rule.hi)) {
        throw Error(whole + "'" + parts[at] + "' (in '" + item + "') is " +
                    (at == 0 ? "neither a collective (" + collectiveList() + ") nor " : std::string("not ")) +
                    "a size range LO-HI (sizes like 0, 4096, 64K, 1M, 2G, inf)");
      }
      if (rule.hi != kNoLimit && rule.lo >= rule.hi) {
        throw Error(whole + "'" + parts[at] + "' (in '" + item +
                    "') is an empty range: LO must be below HI "
                    "(the range is LO <= bytes < HI)");
      }
      ++at;
    }
    rule.algorithm = parts[at];
    if (rule.algorithm.empty()) {
      throw Error(whole + "'" + item + "' names no algorithm; expected [collective:][LO-HI:]algorithm");
    }
    std::string known;
    if (check && !check(rule.collective, rule.algorithm, &known)) {
      throw Error(whole + "'" + rule.algorithm + "' names no " + collectiveName(rule.collective) +
                  " algorithm; known: " + known);
    }
    rules.push_back(rule);
    if (end == text.size()) break;
  }
  return rules;
}

const char* matchRule(const AlgoRules& rules, Collective collective, size_t bytes) {
  for (const AlgoRule& r : rules) {
    if (r.collective == collective && r.covers(bytes)) return r.algorithm.c_str();
  }
  return nullptr;
}

std::string formatAlgoRules(const AlgoRules& rules) {
  std::string s;
  for (const AlgoRule& r : rules) {
    if (!s.empty()) s += ",";
    s += std::string(collectiveName(r.collective)) + ":" + sizeText(r.lo) + "-" + sizeText(r.hi) + ":" + r.algorithm;
  }
  return s;
}

}  // namespace tuning
}  // namespace rdmacoll
