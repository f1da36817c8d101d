// Arrays across the boundary: Python objects viewed as contiguous NumPy arrays without a
// copy (ndarrays, DLPack producers such as CPU torch tensors, buffer-protocol objects),
// dtypes mapped to the core's, and NumPy arrays over pool blocks (rc.empty, results).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "comm/call.h"
#include "comm/pool.h"
#include "common/types.h"

namespace rdmacoll {
namespace py = pybind11;

DataType dtypeOf(const py::dtype& dt);
// An ndarray view of x without copying; throws Error naming `what` when x has none.
py::array asArray(py::handle x, const char* what);
// asArray, and C-contiguous.
py::array contiguousInput(py::handle x, const char* what);
// out must be a writeable contiguous array of the input's shape and dtype.
void checkOut(const py::array& in, const py::array& out);

// Rows of a: its first dimension (a 0-d array is one row of one element), and the
// elements of one row.
size_t rowsOf(const py::array& a);
size_t rowElemsOf(const py::array& a);
std::vector<py::ssize_t> shapeWithRows(const py::array& a, size_t rows);

// A NumPy array over a pool block; the block returns to the pool with the array.
py::array wrapBlock(const py::dtype& dt, const std::vector<py::ssize_t>& dims, std::shared_ptr<MemoryPool> pool,
                    MemoryPool::Block* block);

// The result of a collective whose size is known only once the peers' headers arrived
// (allgather, alltoall): a pool block, adopted by an array afterwards.
class PoolResult : public ResultBuffer {
 public:
  explicit PoolResult(std::shared_ptr<MemoryPool> pool) : pool_(std::move(pool)) {}
  ~PoolResult() override;
  void* allocate(size_t bytes) override;
  // An array over the block (an empty one when nothing was allocated); it owns the block.
  py::array adopt(const py::dtype& dt, const std::vector<py::ssize_t>& dims);

 private:
  std::shared_ptr<MemoryPool> pool_;
  MemoryPool::Block* block_ = nullptr;
};

}  // namespace rdmacoll
