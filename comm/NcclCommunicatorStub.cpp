// makeNcclCommunicator in a build without CUDA: it says so.
#include "comm/NcclCommunicator.h"

#include "framework/core/Error.h"

namespace aps::comm {

std::unique_ptr<Communicator> makeNcclCommunicator(MpiCommunicator& /*bootstrap*/) {
  APS_FAIL("comm.backend: nccl: this build of aps has no CUDA (configure with the CUDA toolkit, NCCL included)");
}

}  // namespace aps::comm
