// NCCL's grammar for lists of names (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), in one place for
// the settings that use it (RDMACOLL_SOCKET_IFNAME, RDMACOLL_IB_HCA):
//   unset          every name is allowed
//   eth,ib         names starting with eth or ib (a comma-separated list of prefixes)
//   =eth0,eth1     exactly eth0 and eth1
//   ^docker,lo     every name that starts with none of these (^ applies to the list)
//   ^=docker0      every name but docker0
// With ports (RDMACOLL_IB_HCA): an item `mlx5_0:1` names port 1 of mlx5_0; an item
// without a port names every port (`=mlx5_0:1,mlx5_1:1`, `^mlx5_1`).
#pragma once
#include <string>
#include <vector>

namespace rdmacoll {

struct NameList {
  struct Item {
    std::string name;
    int port = 0;  // 0: any
  };
  bool set = false;      // the setting was given
  bool exclude = false;  // ^
  bool exact = false;    // =
  std::vector<Item> items;

  // Whether an item names (name, port).
  bool matches(const std::string& name, int port = 0) const;
  // Whether the list lets (name, port) in: everything when unset.
  bool allows(const std::string& name, int port = 0) const { return !set || (matches(name, port) != exclude); }
  // Whether some port of `name` may be allowed (a device the list does not rule out whole).
  bool allowsSomePortOf(const std::string& name) const;
  // What it allows, for messages: "named eth0 or eth1", "name starts with mlx5".
  std::string describe() const;
};

// Parses spec, the value of `setting` (named in errors, which are rdmacoll::Error with
// `who`, the caller's prefix, before them); `ports`: items may carry `:port` (1-255). `noun` is what
// the names name ("interface"), `example` shows the grammar in errors.
NameList parseNameList(const std::string& spec, const char* who, const char* setting, bool ports, const char* noun,
                       const char* example);

}  // namespace rdmacoll
