// rdmacoll-sim: rdmacoll's allreduce schedules replayed on SimGrid (3.32, its C++ API).
//
// Every rank's steps come from rdmacoll_trace::stepsOf (csrc/trace/): the algorithm table's
// own code, run over a Communicator that records instead of moving data. Each rank is an
// actor on a host of its own; its steps run in order:
//   put     handed to the (me, peer) pair's sender, an actor on my host that sends the
//           pair's messages one after another (a queue pair, a byte stream) into a mailbox
//           whose permanent receiver is the peer: the bytes flow before the peer asks for
//           them (one-sided), and the rank goes on at once;
//   await   take messages of the (peer, me) pair until `value` of the flow have arrived;
//   get     a blocking transfer from the peer's host to mine (a read of its memory);
//   reduce  compute for value * gamma seconds; copy: value * copy seconds.
// Bytes travel under SimGrid's CM02 network model with cross-traffic off: a message takes
// its bytes over the bandwidth max-min fair sharing leaves it plus the route's latency, no
// TCP correction factors (RDMA moves bytes without slow start or window; docs/scale.md says
// how the links' latency and bandwidth are calibrated). Fair: CM02 weighs a flow's share
// of a link by the inverse of its route's latency (TCP's round-trip unfairness: a flow
// across a fat tree's spine got half the share of one within a leaf), where NICs and
// switches arbitrate flow by flow. So the links' latencies are 0 in the sharing (every
// flow the same weight) and the simulator adds each message's route latency itself: a
// message is seen that long after its last byte arrived (--latency-weighted 1: CM02's
// own sharing, for comparison).
//
// Platforms (--platform): star (every rank a host on one switch: uniform links), fattree
// and fattree4 (two levels, leaves of 16 hosts, 16 or 4 spines: 1:1 and 4:1), dragonfly
// (groups of 4 chassis x 4 routers x 4 hosts, one link between every pair of groups), hosts8
// (hosts of --ranks-per-host ranks, 8 by default, joined by fast links inside, on a 1:1 fat
// tree; ranks r..r+7 share one) and star8 (such hosts on one switch: uniform links between
// hosts). `--algorithm innet` (star, fattree, fattree4) is a what-if, not one of rdmacoll's:
// the switches sum (inNetworkSteps below). Output: one JSON line.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "trace/schedule.h"

namespace sg4 = simgrid::s4u;
using rdmacoll_trace::Op;
using rdmacoll_trace::Step;

namespace {

struct Options {
  std::string platform = "star", algorithm = "ring_slots";
  int ranks = 16, perHost = 8;
  double bytes = 1 << 20;
  double bandwidth = 25e9, latency = 1e-6;              // per link: bytes/s, s (200 Gb/s; 2 us between hosts)
  double localBandwidth = 40e9, localLatency = 0.5e-6;  // hosts8: inside a host
  double gamma = 1.2e-11, copy = 0;                     // s per byte of reduction input, of copy
  uint64_t segmentBytes = 1 << 20, slotBytes = 256 << 10, eagerBytes = 32 << 10;
  int slots = 4;
  int latencyWeighted = 0;  // 1: CM02's sharing weighted by route latency (as it was)
};

struct PairSender;

struct Rank {
  sg4::Host* host = nullptr;
  std::vector<Step> steps;
  std::unordered_map<int, PairSender*> out;
  std::unordered_map<int, sg4::Mailbox*> in;
  std::unordered_map<int, std::array<uint64_t, rdmacoll_trace::kFlows>> arrived;
  std::unordered_map<int, double> latencyFrom;  // a peer's route latency to me (fair sharing)
  bool done = false;
  double finished = 0;  // when its last step ended: the call returned there
};

std::vector<Rank> g_ranks;
Options g_opt;
uint64_t g_messages = 0;

// Fair sharing: every link's latency, taken out of the platform (set to 0 there).
std::unordered_map<const sg4::Link*, double> g_linkLatency;
void takeLatenciesOut(const sg4::Engine& e) {
  for (sg4::Link* l : e.get_all_links()) {
    g_linkLatency[l] = l->get_latency();
    l->set_latency(0);
  }
}
double routeLatency(const sg4::Host* from, const sg4::Host* to) {
  std::vector<sg4::Link*> links;
  double inPlatform = 0;
  from->route_to(to, links, &inPlatform);
  for (const sg4::Link* l : links) {
    const auto it = g_linkLatency.find(l);
    if (it != g_linkLatency.end()) inPlatform += it->second;
  }
  return inPlatform;
}

sg4::Mailbox* pair(int from, int to) { return sg4::Mailbox::by_name(std::to_string(from) + ">" + std::to_string(to)); }

// One per (sender, receiver) pair, on the sender's host: starts the pair's puts one after
// another, each once the previous one had time to leave at the link's rate (bytes /
// `rate`), as a queue pair or a byte stream sends them back to back: their latencies
// overlap, their bytes do not share the link with each other. The rank queues them and
// goes on (no simulated time passes in the hand-over).
struct PairSender {
  std::deque<std::pair<uint64_t, rdmacoll_trace::Flow>> queue;  // (bytes, flow)
  sg4::MutexPtr mutex = sg4::Mutex::create();
  sg4::ConditionVariablePtr ready = sg4::ConditionVariable::create();
  sg4::Mailbox* wire = nullptr;
  double rate = 0;  // bytes/s of the pair's slowest link
  std::deque<sg4::CommPtr> inflight;

  void post(uint64_t bytes, rdmacoll_trace::Flow flow) {
    queue.emplace_back(bytes, flow);
    ready->notify_one();
  }
  void run() {
    for (;;) {
      std::unique_lock<sg4::Mutex> lock(*mutex);
      while (queue.empty()) ready->wait(lock);
      const auto [bytes, flow] = queue.front();
      queue.pop_front();
      lock.unlock();
      inflight.push_back(wire->put_async(reinterpret_cast<void*>(static_cast<intptr_t>(flow)), bytes));
      while (!inflight.empty() && inflight.front()->test()) inflight.pop_front();
      if (bytes > 0) sg4::this_actor::sleep_for(double(bytes) / rate);
    }
  }
};
std::vector<std::unique_ptr<PairSender>> g_senders;

void play(int r) {
  Rank& me = g_ranks[r];
  for (const Step& s : me.steps) {
    switch (s.op) {
      case Op::kPut:
        me.out[s.peer]->post(s.value, s.flow);
        break;
      case Op::kAwait: {
        auto& got = me.arrived[s.peer];
        sg4::Mailbox*& box = me.in[s.peer];
        if (box == nullptr) box = pair(s.peer, r);  // a peer that never puts: waits forever (a deadlock)
        const double latency = g_opt.latencyWeighted ? 0.0 : me.latencyFrom[s.peer];
        while (got[static_cast<int>(s.flow)] < s.value) {
          void* flow = nullptr;
          sg4::CommPtr comm = box->get_async<void>(&flow);
          comm->wait();
          // its last byte, then the route (a message matched as it was posted has no finish time)
          const double arrived = comm->get_finish_time() >= 0 ? comm->get_finish_time() : sg4::Engine::get_clock();
          const double seen = arrived + latency;
          if (seen > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(seen);
          ++got[reinterpret_cast<intptr_t>(flow)];
        }
        break;
      }
      case Op::kGet:
        if (!g_opt.latencyWeighted) sg4::this_actor::sleep_for(routeLatency(g_ranks[s.peer].host, me.host));
        sg4::Comm::sendto(g_ranks[s.peer].host, me.host, s.value);
        break;
      case Op::kReduce:
        if (g_opt.gamma > 0) sg4::this_actor::execute(double(s.value) * g_opt.gamma * me.host->get_speed());
        break;
      case Op::kCopy:
        if (g_opt.copy > 0) sg4::this_actor::execute(double(s.value) * g_opt.copy * me.host->get_speed());
        break;
    }
  }
  std::vector<Step>().swap(me.steps);
  me.done = true;
  me.finished = sg4::Engine::get_clock();
}

// ---- in-network aggregation, a what-if (not one of rdmacoll's algorithms): switches sum
// what passes through them (SwitchML, SHARP). Every rank streams its n bytes in slot-sized
// segments to its switch, at most `slots` ahead of the results it got back. On a star the
// switch, once it has segment k from every rank, sends the sum back to each. On a fat
// tree (leaves of `leaf` ranks) each leaf switch sums its ranks' segment k and sends the
// partial sum up, striped over its uplinks: every spine sums its 1/spines of each segment
// (one actor for them all, as their shares are alike), and sends the total down, and each
// leaf switch passes it to its ranks. Switches sum at line rate. A rank's link carries n each
// way, where a ring's carries 2 (p-1)/p n; a leaf's uplinks carry n each way, whatever
// the ranks under it.
const std::string kInNetwork = "innet";

// Actors: ranks 0..p-1, then each leaf switch's two (on a fat tree: the one that sums its
// ranks' segments and sends them up, then the one that passes the totals down, as a
// switch's ports work both ways at once), then the top switch (the star's, or the spines').
std::vector<std::vector<Step>> inNetworkSteps(int p, int leaf, uint64_t bytes, uint64_t segment, int window) {
  using rdmacoll_trace::Flow;
  const int leaves = leaf > 0 ? p / leaf : 0, top = p + 2 * leaves;
  const uint64_t nseg = bytes ? (bytes + segment - 1) / segment : 0;
  auto len = [&](uint64_t k) { return std::min(segment, bytes - k * segment); };
  auto up = [&](int r) { return leaves ? p + r / leaf : top; };             // where rank r's segments go
  auto down = [&](int r) { return leaves ? p + leaves + r / leaf : top; };  // where its totals come from
  // a switch's actor: segment k from each of `from` (first, count), then on to each of `to`
  auto sum = [&](std::vector<Step>& me, std::pair<int, int> from, std::pair<int, int> to) {
    for (uint64_t k = 0; k < nseg; ++k) {
      for (int c = from.first; c < from.first + from.second; ++c) me.push_back({Op::kAwait, Flow::kSlot, c, k + 1});
      for (int c = to.first; c < to.first + to.second; ++c) me.push_back({Op::kPut, Flow::kSlot, c, len(k)});
    }
  };
  std::vector<std::vector<Step>> steps(top + 1);
  for (int r = 0; r < p; ++r) {
    for (uint64_t k = 0; k < nseg; ++k) {
      steps[r].push_back({Op::kPut, Flow::kSlot, up(r), len(k)});
      if (k + 1 >= uint64_t(window)) steps[r].push_back({Op::kAwait, Flow::kSlot, down(r), k + 2 - window});
    }
    if (nseg) steps[r].push_back({Op::kAwait, Flow::kSlot, down(r), nseg});
  }
  for (int j = 0; j < leaves; ++j) {
    sum(steps[p + j], {j * leaf, leaf}, {top, 1});           // up: its ranks' sum to the spines
    sum(steps[p + leaves + j], {top, 1}, {j * leaf, leaf});  // down: the total to its ranks
  }
  if (leaves)
    sum(steps[top], {p, leaves}, {p + leaves, leaves});  // the spines: the leaves' sum
  else
    sum(steps[top], {0, p}, {0, p});  // a star's switch
  return steps;
}

// ---- platforms: every rank's host, in rank order
constexpr double kSpeed = 1e9;  // flops/s; compute steps are given in seconds * speed
constexpr int kLeafHosts = 16;  // hosts under a fat tree's leaf switch
// A fat tree's spines, each leaf's uplinks: 16 (1:1) or 4 (4:1).
int spines(const std::string& platform) { return platform == "fattree4" ? 4 : kLeafHosts; }

std::vector<sg4::Host*> g_hosts;

using NetPoint = simgrid::kernel::routing::NetPoint;
// A star zone's member on a link of its own to the star's centre (a host, a router, or a
// child zone through its gateway).
void spoke(sg4::NetZone* zone, NetPoint* member, NetPoint* gateway, const std::string& link, double bandwidth,
           double latency) {
  auto* l = zone->create_split_duplex_link(link, bandwidth);
  l->set_latency(latency)->seal();
  zone->add_route(member, nullptr, gateway, nullptr, {{l, sg4::LinkInRoute::Direction::UP}}, true);
}
sg4::Host* hostOnStar(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency) {
  sg4::Host* h = zone->create_host(name, kSpeed);
  spoke(zone, h->get_netpoint(), nullptr, name + "-l", bandwidth, latency);
  return h;
}

std::pair<NetPoint*, NetPoint*> oneHost(sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
  sg4::Host* h = zone->create_host("h" + std::to_string(id), kSpeed);
  g_hosts.push_back(h);
  return {h->get_netpoint(), nullptr};
}

std::pair<NetPoint*, NetPoint*> hostOf8(sg4::NetZone* zone, const std::vector<unsigned long>&, unsigned long id) {
  const std::string name = "node" + std::to_string(id);
  auto* inside = sg4::create_star_zone(name);
  inside->set_parent(zone);
  for (int i = 0; i < g_opt.perHost; ++i) {
    g_hosts.push_back(hostOnStar(inside, name + "-" + std::to_string(i), g_opt.localBandwidth, g_opt.localLatency));
  }
  auto* gateway = inside->create_router(name + "-nic");
  spoke(inside, gateway, nullptr, name + "-nic-l", g_opt.localBandwidth * 1e3, 0);
  inside->seal();
  return {inside->get_netpoint(), gateway};
}

// The in-network what-if's switches that sum (inNetworkSteps): one on a star, a leaf's
// and the spines' on a fat tree.
bool summingTree() {
  return g_opt.algorithm == kInNetwork && (g_opt.platform == "fattree" || g_opt.platform == "fattree4");
}
int leafRanks() { return summingTree() ? kLeafHosts : 0; }
int switchActors() { return g_opt.algorithm != kInNetwork ? 0 : 1 + (leafRanks() ? 2 * g_opt.ranks / leafRanks() : 0); }

// The fat trees with switches that sum, built of stars (SimGrid's fat-tree zone has routers
// where the switches are, and a router runs no actor): under each leaf its 16 hosts and its
// summing switch, a host whose port reaches all 16 at once; the leaf's uplinks to the
// spines (16, or 4 for 4:1) as one link of their summed rate and one link's latency (a
// segment is striped over them, inNetworkSteps); the spines' summing as one
// host whose port reaches every leaf at once. A route rank-leaf is one link's latency and
// leaf-spines another, as on the fat tree.
void summingFatTree() {
  const Options& o = g_opt;
  const int leaves = o.ranks / kLeafHosts;
  if (leaves * kLeafHosts != o.ranks || leaves < 2) {
    throw std::invalid_argument("fat trees take 32 or more ranks, a multiple of 16");
  }
  const double uplinks = spines(o.platform);
  auto* core = sg4::create_star_zone("core");
  // (each in a zone of its own: a host directly in the root star zone, beside the leaves'
  // zones, is not routed to them in SimGrid 3.32)
  auto zoneOf = [&](const std::string& name) {
    auto* z = sg4::create_star_zone(name);
    z->set_parent(core);
    auto* gateway = z->create_router(name + "-gw");
    spoke(z, gateway, nullptr, name + "-gw-l", o.bandwidth * kLeafHosts * leaves * 1e3, 0);
    return std::make_pair(z, gateway);
  };
  // a summing switch: a host whose port reaches `ports` links at once
  auto summing = [&](sg4::NetZone* z, const std::string& name, double ports) {
    return hostOnStar(z, name, o.bandwidth * ports, 0);
  };
  auto [top, topGateway] = zoneOf("spines");
  sg4::Host* spinesSwitch = summing(top, "spines-switch", uplinks * leaves);
  top->seal();
  spoke(core, top->get_netpoint(), topGateway, "spines-l", o.bandwidth * uplinks * leaves * 1e3, 0);
  std::vector<sg4::Host*> leafSwitches;
  for (int j = 0; j < leaves; ++j) {
    const std::string name = "leaf" + std::to_string(j);
    auto [leaf, gateway] = zoneOf(name);
    for (int i = 0; i < kLeafHosts; ++i) {
      g_hosts.push_back(hostOnStar(leaf, "h" + std::to_string(j * kLeafHosts + i), o.bandwidth, o.latency));
    }
    leafSwitches.push_back(summing(leaf, name + "-switch", kLeafHosts + uplinks));
    leaf->seal();
    spoke(core, leaf->get_netpoint(), gateway, name + "-up", o.bandwidth * uplinks, o.latency);
  }
  for (int twice = 0; twice < 2; ++twice) g_hosts.insert(g_hosts.end(), leafSwitches.begin(), leafSwitches.end());
  g_hosts.push_back(spinesSwitch);
  core->seal();
}

void buildPlatform() {
  const Options& o = g_opt;
  const int p = o.ranks;
  const auto duplex = sg4::Link::SharingPolicy::SPLITDUPLEX;
  if (o.platform == "star") {
    auto* zone = sg4::create_star_zone("star");
    for (int r = 0; r < p; ++r) g_hosts.push_back(hostOnStar(zone, "h" + std::to_string(r), o.bandwidth, o.latency));
    if (o.algorithm == kInNetwork) {  // the switch that sums: its port to every host at once
      g_hosts.push_back(hostOnStar(zone, "switch", o.bandwidth * p, 0));
    }
    zone->seal();
  } else if (o.platform == "star8") {
    if (p % o.perHost != 0) throw std::invalid_argument("star8 takes a multiple of --ranks-per-host ranks");
    auto* zone = sg4::create_star_zone("star");
    for (int n = 0; n < p / o.perHost; ++n) {
      auto [node, gateway] = hostOf8(zone, {}, n);
      spoke(zone, node, gateway, "l" + std::to_string(n), o.bandwidth, o.latency);
    }
    zone->seal();
  } else if (summingTree()) {
    summingFatTree();
  } else if (o.algorithm == kInNetwork && o.platform != "star") {
    throw std::invalid_argument("innet runs on star, fattree and fattree4");
  } else if (o.platform == "fattree" || o.platform == "fattree4" || o.platform == "hosts8") {
    const bool multi = o.platform == "hosts8";
    const int nodes = multi ? p / o.perHost : p;
    if (nodes * (multi ? o.perHost : 1) != p || nodes % kLeafHosts != 0 || nodes < 32) {
      throw std::invalid_argument("fat trees take 32 or more leaves, a multiple of 16 (hosts8: of 8 ranks each)");
    }
    sg4::FatTreeParams params(2, {kLeafHosts, unsigned(nodes / kLeafHosts)}, {1, unsigned(spines(o.platform))}, {1, 1});
    auto* zone = sg4::create_fatTree_zone("fattree", nullptr, params, sg4::ClusterCallbacks(multi ? hostOf8 : oneHost),
                                          o.bandwidth, o.latency, duplex);
    zone->seal();
  } else if (o.platform == "dragonfly") {
    if (p % 64 != 0 || p < 128) throw std::invalid_argument("dragonfly takes a multiple of 64 ranks, 128 or more");
    sg4::DragonflyParams params({unsigned(p / 64), 1}, {4, 1}, {4, 1}, 4);
    auto* zone = sg4::create_dragonfly_zone("dragonfly", nullptr, params, sg4::ClusterCallbacks(oneHost), o.bandwidth,
                                            o.latency, duplex);
    zone->seal();
  } else {
    throw std::invalid_argument("platforms: star, star8, fattree, fattree4, dragonfly, hosts8");
  }
  if (static_cast<int>(g_hosts.size()) != p + switchActors()) {
    throw std::logic_error("platform built the wrong number of hosts");
  }
}

double number(const char* flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end) {
    std::fprintf(stderr, "rdmacoll-sim: %s wants a number, not '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

void parse(int argc, char** argv) {
  Options& o = g_opt;
  // The numeric flags, one table: name and where its value goes.
  struct Flag {
    const char* name;
    std::function<void(double)> set;
  };
  const auto real = [](double& x) { return [&x](double v) { x = v; }; };
  const auto whole = [](auto& x) { return [&x](double v) { x = static_cast<std::decay_t<decltype(x)>>(v); }; };
  const Flag flags[] = {
      {"--ranks", whole(o.ranks)},
      {"--ranks-per-host", whole(o.perHost)},
      {"--bytes", real(o.bytes)},
      {"--bandwidth", real(o.bandwidth)},
      {"--latency", real(o.latency)},
      {"--local-bandwidth", real(o.localBandwidth)},
      {"--local-latency", real(o.localLatency)},
      {"--gamma", real(o.gamma)},
      {"--copy", real(o.copy)},
      {"--segment-bytes", whole(o.segmentBytes)},
      {"--slot-bytes", whole(o.slotBytes)},
      {"--slots", whole(o.slots)},
      {"--eager-bytes", whole(o.eagerBytes)},
      {"--latency-weighted", whole(o.latencyWeighted)},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--cfg=", 0) == 0) continue;  // SimGrid's own options
    if (i + 1 >= argc) {
      std::fprintf(stderr, "rdmacoll-sim: %s wants a value\n", a.c_str());
      std::exit(2);
    }
    const char* v = argv[++i];
    if (a == "--platform") {
      o.platform = v;
    } else if (a == "--algorithm") {
      o.algorithm = v;
    } else {
      const auto f = std::find_if(std::begin(flags), std::end(flags), [&](const Flag& x) { return a == x.name; });
      if (f == std::end(flags)) {
        std::fprintf(stderr, "rdmacoll-sim: unknown option %s\n", a.c_str());
        std::exit(2);
      }
      f->set(number(a.c_str(), v));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);
  parse(argc, argv);
  e.set_config("network/model:CM02");
  e.set_config("network/crosstraffic:0");
  e.set_config("network/TCP-gamma:0");
  // No guard page under each actor's stack: with one, every stack is two mappings, and the
  // 4,096-rank recursive doubling and halving-doubling passed the kernel's 65,530 mappings
  // per process (vm.max_map_count) and aborted. The actors' own code is this file's: shallow
  // calls on SimGrid's 8 MiB stacks, far from an overflow the guard page would have caught.
  e.set_config("contexts/guard-size:0");
  try {
    buildPlatform();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "rdmacoll-sim: %s\n", ex.what());
    return 2;
  }
  const Options& o = g_opt;
  if (!o.latencyWeighted) takeLatenciesOut(e);
  rdmacoll_trace::Request req;
  req.algorithm = o.algorithm;
  req.ranks = o.ranks;
  req.dtype = 2;  // float32 (common/types.h)
  req.count = uint64_t(o.bytes / 4);
  for (int r = 0; r < o.ranks; ++r)
    req.hostOf.push_back(o.platform == "hosts8" || o.platform == "star8" ? r / o.perHost : r);
  req.segmentBytes = o.segmentBytes;
  req.slotBytes = o.slotBytes;
  req.slots = o.slots;
  req.eagerBytes = o.eagerBytes;
  const bool innet = o.algorithm == kInNetwork;
  const int actorsCount = o.ranks + switchActors();  // the summing switches are actors too
  g_ranks.resize(actorsCount);
  std::vector<sg4::ActorPtr> actors;
  uint64_t steps = 0, mostPut = 0, mostIn = 0;
  std::vector<uint64_t> into(actorsCount, 0);
  std::vector<std::vector<Step>> synthesized;
  if (innet) synthesized = inNetworkSteps(o.ranks, leafRanks(), uint64_t(o.bytes), o.slotBytes, o.slots);
  for (int r = 0; r < actorsCount; ++r) {
    try {
      g_ranks[r].steps = innet ? std::move(synthesized[r]) : rdmacoll_trace::stepsOf(req, r);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "rdmacoll-sim: %s\n", ex.what());
      return 2;
    }
    g_ranks[r].host = g_hosts[r];
    steps += g_ranks[r].steps.size();
    uint64_t put = 0;
    for (const Step& s : g_ranks[r].steps) {
      if (s.op == Op::kPut) put += s.value, into[s.peer] += s.value;
      if (s.op == Op::kGet) into[r] += s.value;
    }
    mostPut = std::max(mostPut, put);
  }
  for (int r = 0; r < o.ranks; ++r) mostIn = std::max(mostIn, into[r]);
  for (int r = 0; r < actorsCount; ++r)
    actors.push_back(sg4::Actor::create("r" + std::to_string(r), g_hosts[r], play, r));
  // Every pair that puts gets a sender (a daemon: it ends with the ranks) fed through a
  // queue on the sender's host, and a wire mailbox whose permanent receiver is the
  // receiving rank, so that the bytes flow before it asks for them (one-sided).
  for (int r = 0; r < actorsCount; ++r) {
    for (const Step& s : g_ranks[r].steps) {
      if (s.op != Op::kPut || g_ranks[r].out.count(s.peer)) continue;
      sg4::Mailbox* wire = pair(r, s.peer);
      wire->set_receiver(actors[s.peer]);
      g_senders.push_back(std::make_unique<PairSender>());
      PairSender* sender = g_senders.back().get();
      sender->wire = wire;
      const bool hosts = o.platform == "hosts8" || o.platform == "star8";  // ranks in hosts: local links
      const bool switches = innet && r >= o.ranks && s.peer >= o.ranks;    // a leaf's and the spines'
      sender->rate = switches                              ? o.bandwidth * spines(o.platform)
                     : !hosts || innet                     ? o.bandwidth
                     : req.hostOf[r] == req.hostOf[s.peer] ? o.localBandwidth
                                                           : std::min(o.bandwidth, o.localBandwidth);
      sg4::Actor::create("s" + std::to_string(r) + ">" + std::to_string(s.peer), g_hosts[r], [sender] {
        sender->run();
      })->daemonize();
      g_ranks[r].out[s.peer] = sender;
      g_ranks[s.peer].in[r] = wire;
      if (!o.latencyWeighted) g_ranks[s.peer].latencyFrom[r] = routeLatency(g_hosts[r], g_hosts[s.peer]);
      ++g_messages;
    }
  }
  e.run();
  double last = 0;  // the last rank's return (puts still in flight after it, credits, do not count)
  for (int r = 0; r < actorsCount; ++r) {
    if (r < o.ranks) last = std::max(last, g_ranks[r].finished);
    if (!g_ranks[r].done) {
      std::fprintf(stderr, "rdmacoll-sim: rank %d never finished: the schedule deadlocks\n", r);
      return 3;
    }
  }
  for (int r = 0; r < actorsCount; ++r) {
    for (auto& kv : g_ranks[r].in) kv.second->set_receiver(nullptr);
  }
  std::printf(
      "{\"platform\": \"%s\", \"algorithm\": \"%s\", \"ranks\": %d, \"bytes\": %.0f, \"seconds\": %.9g, "
      "\"steps\": %llu, \"pairs\": %llu, \"most_put\": %llu, \"most_received\": %llu}\n",
      o.platform.c_str(), o.algorithm.c_str(), o.ranks, o.bytes, last, (unsigned long long)steps,
      (unsigned long long)g_messages, (unsigned long long)mostPut, (unsigned long long)mostIn);
  return 0;
}
