#include "common/settings.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/error.h"

namespace rdmacoll {
namespace settings {

namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

const std::vector<Setting> kTable = {
    {"algo", "RDMACOLL_ALGO", nullptr, Kind::kText, Scope::kJob, "", 0, kNone, 1, nullptr, Check::kAlgoRules,
     "force algorithms: a name (`ring`) or rules `[collective:][LO-HI:]name,...` (LO <= bytes < "
     "HI, HI may be "
     "`inf`); a forced algorithm applies where it can run, the cost model chooses elsewhere"},
    {"tuning_file", "RDMACOLL_TUNING_FILE", nullptr, Kind::kText, Scope::kJob, "", 0, kNone, 1, nullptr, Check::kNone,
     "the cost model's constants, written by `rdmacoll-bench --tune` (unset: "
     "~/.cache/rdmacoll/tuning.json if "
     "present; `none`: the shipped defaults); read on rank 0"},
    {"timeout", "RDMACOLL_TIMEOUT", nullptr, Kind::kSeconds, Scope::kJob, "600", 0.001, kNone, 1, nullptr, Check::kNone,
     "seconds a wait may make no progress before every rank raises"},
    {"elastic_timeout", "RDMACOLL_ELASTIC_TIMEOUT", "HOROVOD_ELASTIC_TIMEOUT", Kind::kSeconds, Scope::kJob, "600",
     0.001, kNone, 1, nullptr, Check::kNone,
     "elastic jobs (`rdmacoll-run --elastic`): seconds the job may wait for enough hosts (`--min-np`) before it "
     "ends with an error on every rank"},
    {"eager_bytes", "RDMACOLL_EAGER_BYTES", nullptr, Kind::kBytes, Scope::kJob, "32K", 0, double(1 << 30), 1, nullptr,
     Check::kNone, "largest message sent whole to every peer (`eager`)"},
    {"segment_bytes", "RDMACOLL_SEGMENT_BYTES", nullptr, Kind::kBytes, Scope::kJob, "1M", 4096, kNone, 64, nullptr,
     Check::kNone, "pipelining unit of the rings and trees"},
    {"slot_bytes", "RDMACOLL_SLOT_BYTES", nullptr, Kind::kBytes, Scope::kJob, "256K", 4096, kNone, 64, nullptr,
     Check::kNone, "one receive slot: the largest message of the slot algorithms"},
    {"pool_free_bytes", "RDMACOLL_POOL_FREE_BYTES", nullptr, Kind::kBytes, Scope::kJob, "1G", 0, kNone, 1, nullptr,
     Check::kNone,
     "free memory of the pool (`rc.empty`, out-of-place results) kept faulted in for reuse; past it, "
     "the largest free blocks give their pages back"},
    {"slots", "RDMACOLL_SLOTS", nullptr, Kind::kCount, Scope::kJob, "0", 0, 64, 1, nullptr, Check::kNone,
     "receive slots per peer (messages in flight to one peer); 0: enough for the network's "
     "bandwidth-delay product, at least 4"},
    {"network_oversubscription", "RDMACOLL_NETWORK_OVERSUBSCRIPTION", nullptr, Kind::kCount, Scope::kJob, "1", 1, 1024,
     1, nullptr, Check::kNone,
     "the network core's oversubscription (4 for a 4:1 fat tree): selection charges exchanges between ranks "
     "`network_leaf_ranks` or more apart this many times the bytes (docs/scale.md)"},
    {"network_leaf_ranks", "RDMACOLL_NETWORK_LEAF_RANKS", nullptr, Kind::kCount, Scope::kJob, "0", 0, 1 << 30, 1,
     nullptr, Check::kNone,
     "ranks under one leaf switch (consecutive ranks): closer exchanges stay off the core (0: every exchange "
     "between hosts crosses it)"},
    {"transport", "RDMACOLL_TRANSPORT", nullptr, Kind::kText, Scope::kJob, "auto", 0, kNone, 1, nullptr,
     Check::kTransport,
     "which backend reaches which peers: `auto` (shared memory within a host, the network between "
     "hosts) or "
     "one backend for every peer (`rdmacoll doctor` lists those compiled in)"},
    {"fusion_threshold", "RDMACOLL_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", Kind::kBytes, Scope::kJob, "32M", 0,
     kNone, 1, nullptr, Check::kNone, "framework adapters: bytes of gradients fused into one bucket (0: one each)"},
    {"stall_warning", "RDMACOLL_STALL_WARNING_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", Kind::kSeconds, Scope::kJob,
     "60", 0, kNone, 1, nullptr, Check::kNone,
     "log which ranks have not started a call that others wait in after this long (0: never)"},
    {"stall_shutdown", "RDMACOLL_STALL_SHUTDOWN_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", Kind::kSeconds,
     Scope::kJob, "0", 0, kNone, 1, nullptr, Check::kNone, "raise on every rank after a stall this long (0: never)"},
    {"timeline", "RDMACOLL_TIMELINE", "HOROVOD_TIMELINE", Kind::kText, Scope::kJob, "", 0, kNone, 1, nullptr,
     Check::kNone, "write a Chrome trace per rank (`path.rank<r>.json`) of every operation's phases"},
    {"log_level", "RDMACOLL_LOG_LEVEL", "HOROVOD_LOG_LEVEL", Kind::kText, Scope::kRank, "warning", 0, kNone, 1, nullptr,
     Check::kLogLevel,
     "messages shown: `error`, `warning`, `info` (at init(): transports, interface, settings and "
     "their sources) or "
     "`debug` (also each algorithm chosen); any case. Unset: the `rdmacoll` logger's own level "
     "(Python logging)"},
    {"dynamic_process_sets", "RDMACOLL_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", Kind::kCount, Scope::kJob,
     "0", 0, 1, 1, nullptr, Check::kNone,
     "1: process sets may be added and removed after init() (`add_process_set`, "
     "`remove_process_set`); 0: only "
     "those given to `init(process_sets=[...])` (`process_sets=\"dynamic\"` also turns it on)"},
    {"bootstrap", "RDMACOLL_BOOTSTRAP", nullptr, Kind::kText, Scope::kRank, "auto", 0, kNone, 1, "auto|mpi|torch",
     Check::kNone,
     "who tells rdmacoll the ranks and peers: `mpi` (mpiexec, mpirun, srun through the MPI), "
     "`torch` (torchrun's "
     "store: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or `auto` (the launcher found in the "
     "environment)"},
    {"socket_ifname", "RDMACOLL_SOCKET_IFNAME", nullptr, Kind::kText, Scope::kRank, "", 0, kNone, 1, nullptr,
     Check::kNone,
     "which interfaces the network transport may listen on, as NCCL_SOCKET_IFNAME: prefixes "
     "(eth,ib), exact "
     "names (=eth0), excluded (^docker,lo); unset: the first that is up, lo/docker/virbr/veth ones "
     "only when nothing "
     "else is; IPv6 where it has no IPv4"},
    {"ib_hca", "RDMACOLL_IB_HCA", nullptr, Kind::kText, Scope::kRank, "", 0, kNone, 1, nullptr, Check::kNone,
     "which RDMA devices and ports to use, as NCCL_IB_HCA: prefixes (mlx5), exact names (=mlx5_0), "
     "ports (mlx5_0:1,mlx5_1:1), excluded (^mlx5_1); the ACTIVE ports allowed are the rails, up to 2 of "
     "the first one's link layer (unset: those of any device)"},
    {"ib_gid_index", "RDMACOLL_IB_GID_INDEX", nullptr, Kind::kCount, Scope::kRank, "-1", -1, 65535, 1, nullptr,
     Check::kNone, "RoCE: the GID index (-1: the IPv4-mapped RoCE v2 GID)"},
    {"ib_qps_per_connection", "RDMACOLL_IB_QPS_PER_CONNECTION", nullptr, Kind::kCount, Scope::kJob, "1", 1, 16, 1,
     nullptr, Check::kNone,
     "RDMA queue pairs per peer, as NCCL_IB_QPS_PER_CONNECTION: a write of 64 KiB or more from "
     "registered memory with an immediate is split across them; at least one per rail"},
    {"ib_max_message", "RDMACOLL_IB_MAX_MESSAGE", nullptr, Kind::kBytes, Scope::kRank, "0", 0, kNone, 1, nullptr,
     Check::kNone,
     "largest RDMA work request; longer writes and reads are split (0: the port's max_msg_sz, at "
     "most 1 GiB)"},
    {"ibverbs_library", "RDMACOLL_IBVERBS_LIBRARY", nullptr, Kind::kText, Scope::kRank, "", 0, kNone, 1, nullptr,
     Check::kNone, "the verbs library to load (unset: libibverbs.so.1)"},
    {"cuda_chunk_bytes", "RDMACOLL_CUDA_CHUNK_BYTES", nullptr, Kind::kBytes, Scope::kJob, "4M", 4096, kNone, 4096,
     nullptr, Check::kNone,
     "GPU tensors: the unit of the staging pipeline (copying one chunk to the host, reducing the "
     "previous and copying the one before back overlap)"},
    {"cuda_staging_bytes", "RDMACOLL_CUDA_STAGING_BYTES", nullptr, Kind::kBytes, Scope::kJob, "64M", 4096, kNone, 4096,
     nullptr, Check::kNone,
     "GPU tensors: page-locked host memory per communicator that chunks travel through (made on "
     "the first GPU call)"},
    {"cuda_runtime", "RDMACOLL_CUDA_RUNTIME", nullptr, Kind::kText, Scope::kRank, "", 0, kNone, 1, nullptr,
     Check::kNone,
     "the CUDA runtime library to load (unset: the one torch or CuPy loaded, else libcudart.so.13, "
     ".12, .11.0, else /usr/local/cuda/lib64/libcudart.so)"},
};

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string number(double v) {
  std::string s = std::to_string(v);
  while (s.find('.') != std::string::npos && (s.back() == '0' || s.back() == '.')) {
    const bool dot = s.back() == '.';
    s.pop_back();
    if (dot) break;
  }
  return s;
}

[[noreturn]] void bad(const Setting& s, const std::string& text, const std::string& why) {
  throw Error(std::string(s.env) + "='" + text + "' " + why);
}

void checkBounds(const Setting& s, const std::string& text, double v) {
  if (v >= s.min && v <= s.max) return;
  std::string range =
      s.max == kNone ? "at least " + number(s.min) : "between " + number(s.min) + " and " + number(s.max);
  bad(s, text, "is out of range: " + std::string(s.name) + " must be " + range);
}

}  // namespace

const std::vector<Setting>& table() { return kTable; }

const Setting& find(const std::string& name) {
  for (const Setting& s : kTable) {
    if (name == s.name || name == s.env) return s;
  }
  std::string known;
  for (const Setting& s : kTable) known += (known.empty() ? "" : ", ") + std::string(s.name);
  throw Error("unknown setting '" + name + "'; known: " + known);
}

const char* bytesForms() {
  return "a whole number of bytes such as 32768, 32K, 32KB, 32KiB or 1.5M (K, M, G, T: powers of "
         "1024)";
}

bool parseBytes(const std::string& raw, bool allowInf, uint64_t* out) {
  std::string t = trim(raw);
  for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (t == "inf") {
    if (!allowInf) return false;
    *out = kInf;
    return true;
  }
  // digits [. digits] [k|m|g|t [i]] [b]
  using U = unsigned __int128;
  U whole = 0, frac = 0, scale = 1;
  size_t i = 0, digits = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i, ++digits) {
    whole = whole * 10 + unsigned(t[i] - '0');
    if (whole > U(UINT64_MAX)) return false;
  }
  if (i < t.size() && t[i] == '.') {
    for (++i; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i, ++digits) {
      if (scale > U(UINT64_MAX)) return false;  // more fraction digits than can matter
      frac = frac * 10 + unsigned(t[i] - '0');
      scale *= 10;
    }
  }
  if (digits == 0) return false;
  unsigned shift = 0;
  if (i < t.size()) {
    const char* units = "kmgt";
    for (unsigned u = 0; u < 4; ++u) {
      if (t[i] == units[u]) shift = 10 * (u + 1);
    }
    if (shift) {
      ++i;
      if (i < t.size() && t[i] == 'i') ++i;
    }
  }
  if (i < t.size() && t[i] == 'b') ++i;
  if (i != t.size()) return false;
  const U mult = U(1) << shift;
  const U fracBytes = frac * mult;
  if (fracBytes % scale != 0) return false;  // not a whole number of bytes
  const U v = whole * mult + fracBytes / scale;
  if (v >= U(UINT64_MAX)) return false;  // (UINT64_MAX itself is kInf)
  *out = static_cast<uint64_t>(v);
  return true;
}

Value parse(const Setting& s, const std::string& raw) {
  Value v;
  v.text = trim(raw);
  switch (s.kind) {
    case Kind::kBytes:
      if (!parseBytes(v.text, false, &v.bytes)) bad(s, v.text, std::string("is not a size: use ") + bytesForms());
      checkBounds(s, v.text, double(v.bytes));
      if (v.bytes % s.multipleOf != 0) {
        bad(s, v.text, "is not a multiple of " + std::to_string(s.multipleOf) + " bytes");
      }
      break;
    case Kind::kCount: {
      char* end = nullptr;
      errno = 0;
      const long long n = v.text.empty() ? 0 : std::strtoll(v.text.c_str(), &end, 10);
      if (v.text.empty() || *end != 0 || errno == ERANGE) bad(s, v.text, "is not a whole number");
      v.count = n;
      checkBounds(s, v.text, double(n));
      break;
    }
    case Kind::kSeconds: {
      char* end = nullptr;
      const double d = v.text.empty() ? 0 : std::strtod(v.text.c_str(), &end);
      if (v.text.empty() || *end != 0 || !std::isfinite(d)) bad(s, v.text, "is not a number of seconds");
      v.seconds = d;
      checkBounds(s, v.text, d);
      break;
    }
    case Kind::kText:
      if (s.choices) {
        const std::string all = std::string("|") + s.choices + "|";
        if (v.text.find('|') != std::string::npos || all.find("|" + v.text + "|") == std::string::npos) {
          std::string list = s.choices;
          for (char& ch : list) ch = ch == '|' ? ',' : ch;
          bad(s, v.text, "is not one of: " + list);
        }
      }
      break;
  }
  return v;
}

Values::Values() {
  for (const Setting& s : kTable) values_.push_back(parse(s, s.defaultText));
}

void Values::set(const std::string& name, const std::string& text) {
  const Setting& s = find(name);
  values_[&s - kTable.data()] = parse(s, text);
}

const Value& Values::at(const char* name, Kind kind) const {
  const Setting& s = find(name);
  if (s.kind != kind) throw Error(std::string("internal: setting ") + name + " read as another kind");
  return values_[&s - kTable.data()];
}

}  // namespace settings
}  // namespace rdmacoll
