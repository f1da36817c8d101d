// The settings of rdmacoll: one table, one grammar (docs/design.md: "Every setting is
// declared once, in the table").
//
// A row: the setting's name (its key in rdmacoll.init(config=...) and in the settings the
// core receives), its environment variable (and an alias that job scripts written for
// Horovod set, which the RDMACOLL_ variable overrides), its kind, its default written in
// the setting's own grammar, its bounds and one line of documentation. The table is
// exported to Python (_core.SETTINGS), which reads the environment through it, parses
// every value with parse() below and broadcasts rank 0's job-wide values at init(); each
// layer of the core builds what it needs from the parsed values (comm's Protocol,
// transport's Options, tuning's Policy), never from the environment.
//
// Grammar (parse)
//   bytes    a whole number of bytes: a number (a fraction allowed) and an optional unit
//            K, M, G or T (powers of 1024) optionally followed by i and/or B, any case,
//            spaces around: 32768, 32K, 32KB, 32KiB, 1.5M. `inf` is accepted only where a
//            size has no upper limit (the upper end of an RDMACOLL_ALGO range).
//   count    a whole number, e.g. 4
//   seconds  a decimal number, e.g. 600 or 0.5
//   text     any text (surrounding spaces dropped), or one of the row's choices; some are
//            checked by the layer that uses them (Check below) when the setting is read,
//            so a bad value fails init() on every rank
//
// Scope: job-wide settings take rank 0's value everywhere (ranks that disagreed on them
// would run different protocols); per-rank ones are read by every rank from its own
// environment (which interface, which RDMA device: they differ between hosts).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll {
namespace settings {

enum class Kind : uint8_t { kBytes, kCount, kSeconds, kText };
enum class Scope : uint8_t { kJob, kRank };
// Text settings whose value a higher layer checks (runtime/settings_check.cc).
enum class Check : uint8_t { kNone, kAlgoRules, kTransport, kLogLevel };

constexpr uint64_t kInf = UINT64_MAX;  // `inf` where a size may be unlimited

struct Setting {
  const char* name;   // "eager_bytes"
  const char* env;    // "RDMACOLL_EAGER_BYTES"
  const char* alias;  // another variable read when env is unset, or nullptr
  Kind kind;
  Scope scope;
  const char* defaultText;  // in the grammar of `kind`
  double min, max;          // inclusive bounds of bytes, count and seconds
  uint64_t multipleOf;      // bytes: a multiple of this (1: any)
  const char* choices;      // text: the values allowed, "a|b|c" (nullptr: any)
  Check check;
  const char* doc;
};

// Every setting, in the order the README's table lists them.
const std::vector<Setting>& table();
// The row named `name` (a setting name or its variable); throws Error listing the names.
const Setting& find(const std::string& name);

// A parsed value: the field of its kind is set (text keeps the trimmed input always).
struct Value {
  uint64_t bytes = 0;
  int64_t count = 0;
  double seconds = 0;
  std::string text;
};

// Parses `text` as setting s and checks its bounds. Throws Error naming the variable,
// quoting the value and giving the accepted forms.
Value parse(const Setting& s, const std::string& text);

// The bytes grammar above; false when malformed or not a whole number of bytes.
bool parseBytes(const std::string& text, bool allowInf, uint64_t* bytes);
// "a size such as 32768, 32K, 32KB, 32KiB or 1.5M (K, M, G, T: powers of 1024)".
const char* bytesForms();

// Every setting's value: defaults until set. What the binding hands to each layer.
class Values {
 public:
  Values();                                                    // every setting at its default
  void set(const std::string& name, const std::string& text);  // parse() and store
  uint64_t bytes(const char* name) const { return at(name, Kind::kBytes).bytes; }
  int64_t count(const char* name) const { return at(name, Kind::kCount).count; }
  double seconds(const char* name) const { return at(name, Kind::kSeconds).seconds; }
  const std::string& text(const char* name) const { return at(name, Kind::kText).text; }

 private:
  const Value& at(const char* name, Kind kind) const;
  std::vector<Value> values_;  // in table order
};

}  // namespace settings
}  // namespace rdmacoll
