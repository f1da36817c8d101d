// Test hooks for the staging pipeline (runtime/staging.h) without a GPU: runStaged over a
// fake device whose two copy streams run their queued work as late as the waits allow
// ("lazy") or at once ("eager"). A pipeline that reused a slot before its upload finished,
// or read a slot before its download arrived, gives a wrong result in one mode or the
// other (tests/test_gpu_staging.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <deque>
#include <map>
#include <functional>
#include <string>
#include <vector>

#include "python/testing/hooks.h"
#include "runtime/staging.h"

namespace py = pybind11;
using namespace rdmacoll;

namespace {

class FakeCopies : public DeviceCopies {
 public:
  FakeCopies(int slots, bool eager) : eager_(eager), downDone_(slots, 0), upDone_(slots, 0) {}
  std::vector<std::string> log;

  void begin() override { log.push_back("begin"); }
  void toHost(int slot, void* host, const void* dev, size_t n) override {
    log.push_back("down " + std::to_string(slot));
    const long after = upQueued_[slot];  // the upload that last used the slot
    down_.push_back([=] {
      runUpTo(slot, after);
      std::memcpy(host, dev, n);
      ++downDone_[slot];
    });
    ++downQueued_[slot];
    if (eager_) drain(down_);
  }
  void waitHost(int slot) override {
    log.push_back("wait down " + std::to_string(slot));
    while (downDone_[slot] < downQueued_[slot]) step(down_);
  }
  void waitFree(int slot) override {
    log.push_back("wait up " + std::to_string(slot));
    runUpTo(slot, upQueued_[slot]);
  }
  void toDevice(int slot, void* dev, const void* host, size_t n) override {
    log.push_back("up " + std::to_string(slot));
    up_.push_back([=] {
      std::memcpy(dev, host, n);
      ++upDone_[slot];
    });
    ++upQueued_[slot];
    if (eager_) drain(up_);
  }
  void finish() override {
    log.push_back("finish");
    drain(down_);
    drain(up_);
  }

 private:
  void step(std::deque<std::function<void()>>& q) {
    auto f = std::move(q.front());
    q.pop_front();
    f();
  }
  void drain(std::deque<std::function<void()>>& q) {
    while (!q.empty()) step(q);
  }
  void runUpTo(int slot, long count) {
    while (upDone_[slot] < count) step(up_);
  }
  bool eager_;
  std::deque<std::function<void()>> down_, up_;
  std::vector<long> downDone_, upDone_;
  std::map<int, long> downQueued_, upQueued_;
};

}  // namespace

void bindTestingStaging(py::module_& t) {
  t.def("staging_plan", [](size_t bytes, size_t elem, size_t chunk, int slots) {
    py::list out;
    const StagingPlan plan = stagingPlan(bytes, elem, chunk, slots);
    for (size_t j = 0; j < plan.count(); ++j) {
      const StagedChunk c = plan.at(j);
      out.append(py::make_tuple(c.offset, c.bytes, c.slot));
    }
    return out;
  });
  t.def(
      "staging_run",
      [](py::array_t<float, py::array::c_style> devIn, py::array_t<float, py::array::c_style> devOut, size_t chunk,
         int slots, bool download, bool upload, bool eager, py::function collective) {
        const size_t n = static_cast<size_t>(devIn.nbytes());
        const auto plan = stagingPlan(n, sizeof(float), chunk, slots);
        std::vector<char> ring(static_cast<size_t>(slots) * chunk);
        FakeCopies copies(slots, eager);
        runStaged(plan, copies, ring.data(), chunk, download ? reinterpret_cast<const char*>(devIn.data()) : nullptr,
                  upload ? reinterpret_cast<char*>(devOut.mutable_data()) : nullptr, [&](char* slot, size_t bytes) {
                    // the host collective: collective(view of the slot) changes it in place
                    py::array_t<float> view({static_cast<py::ssize_t>(bytes / sizeof(float))},
                                            {static_cast<py::ssize_t>(sizeof(float))}, reinterpret_cast<float*>(slot),
                                            py::none());
                    collective(view);
                  });
        return copies.log;
      },
      py::arg("dev_in"), py::arg("dev_out"), py::arg("chunk"), py::arg("slots"), py::arg("download"), py::arg("upload"),
      py::arg("eager"), py::arg("collective"),
      "runStaged over fake copies (host memory as the device): the events in order");
}
