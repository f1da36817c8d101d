#include "common/name_list.h"

#include <cstdlib>

#include "common/error.h"

namespace rdmacoll {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Whether `item` names `name`: equal (exact) or a prefix of it.
bool names(const NameList::Item& item, const std::string& name, bool exact) {
  return exact ? name == item.name : name.compare(0, item.name.size(), item.name) == 0;
}

}  // namespace

bool NameList::matches(const std::string& name, int port) const {
  for (const Item& it : items) {
    if (names(it, name, exact) && (it.port == 0 || port == 0 || it.port == port)) return true;
  }
  return false;
}

bool NameList::allowsSomePortOf(const std::string& name) const {
  if (!set) return true;
  if (!exclude) return matches(name);
  for (const Item& it : items) {
    if (names(it, name, exact) && it.port == 0) return false;  // excluded whole
  }
  return true;
}

std::string NameList::describe() const {
  std::string names;
  for (const Item& it : items) {
    names += (names.empty() ? "" : " or ") + it.name + (it.port ? ":" + std::to_string(it.port) : "");
  }
  if (exclude) return "excluding " + std::string(exact ? "" : "names starting with ") + names;
  return exact ? "named " + names : "name starts with " + names;
}

NameList parseNameList(const std::string& spec, const char* who, const char* setting, bool ports, const char* noun,
                       const char* example) {
  NameList r;
  const std::string s = trim(spec);
  if (s.empty()) return r;
  r.set = true;
  const std::string head = std::string(who) + setting + "=" + spec;
  size_t i = 0;
  if (s[i] == '^') r.exclude = true, ++i;
  if (i < s.size() && s[i] == '=') r.exact = true, ++i;
  while (i <= s.size()) {
    size_t comma = s.find(',', i);
    if (comma == std::string::npos) comma = s.size();
    std::string item = trim(s.substr(i, comma - i));
    i = comma + 1;
    if (item.empty()) continue;
    if (item[0] == '^' || item[0] == '=') {
      throw Error(head + ": '" + item.substr(0, 1) + "' applies to the whole list and is written once, at its start (" +
                  example + ")");
    }
    NameList::Item it;
    const size_t colon = ports ? item.rfind(':') : std::string::npos;
    if (colon != std::string::npos) {
      const std::string p = item.substr(colon + 1);
      char* end = nullptr;
      const long port = std::strtol(p.c_str(), &end, 10);
      if (p.empty() || *end != '\0' || port < 1 || port > 255) {
        throw Error(head + ": bad port '" + p + "' in '" + item + "' (a port is 1-255: mlx5_0:1)");
      }
      it.port = static_cast<int>(port);
      item.resize(colon);
    }
    it.name = trim(item);
    if (it.name.empty()) throw Error(head + ": an item without a name ('" + item + "')");
    r.items.push_back(it);
  }
  if (r.items.empty()) throw Error(head + " names no " + noun + " (" + example + ")");
  return r;
}

}  // namespace rdmacoll
