// The NCCL functions halogen calls, defined here and forwarded to libnccl, which is loaded on
// the first call (core/lazy_library.hpp explains why). Signatures as in nccl.h. When the
// library cannot be loaded, every call returns ncclSystemError and ncclGetErrorString returns
// the loader's message.
#include "halogen/config.hpp"

#if HALOGEN_HAVE_NCCL

#include <nccl.h>

#include <string>

#include "halogen/core/lazy_library.hpp"

namespace {

halogen::LazyLibrary& nccl_library() {
  static halogen::LazyLibrary library({"libnccl.so." + std::to_string(NCCL_MAJOR), "libnccl.so"});
  return library;
}

template <typename Function>
Function* resolve(const char* name) {
  return reinterpret_cast<Function*>(nccl_library().symbol(name));
}

}  // namespace

// Forwards a call returning ncclResult_t.
#define HALOGEN_NCCL_FORWARD(name, params, args)             \
  ncclResult_t name params {                                 \
    static auto* real = resolve<ncclResult_t params>(#name); \
    return real != nullptr ? real args : ncclSystemError;    \
  }

extern "C" {

HALOGEN_NCCL_FORWARD(ncclGetUniqueId, (ncclUniqueId * unique_id), (unique_id))
HALOGEN_NCCL_FORWARD(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId comm_id, int rank),
                     (comm, nranks, comm_id, rank))
HALOGEN_NCCL_FORWARD(ncclCommDestroy, (ncclComm_t comm), (comm))
HALOGEN_NCCL_FORWARD(ncclCommAbort, (ncclComm_t comm), (comm))
HALOGEN_NCCL_FORWARD(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* async_error), (comm, async_error))
HALOGEN_NCCL_FORWARD(ncclBroadcast,
                     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                      ncclComm_t comm, cudaStream_t stream),
                     (sendbuff, recvbuff, count, datatype, root, comm, stream))
HALOGEN_NCCL_FORWARD(ncclAllReduce,
                     (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                      ncclComm_t comm, cudaStream_t stream),
                     (sendbuff, recvbuff, count, datatype, op, comm, stream))
HALOGEN_NCCL_FORWARD(ncclSend,
                     (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream),
                     (sendbuff, count, datatype, peer, comm, stream))
HALOGEN_NCCL_FORWARD(ncclRecv,
                     (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream),
                     (recvbuff, count, datatype, peer, comm, stream))
HALOGEN_NCCL_FORWARD(ncclGroupStart, (), ())
HALOGEN_NCCL_FORWARD(ncclGroupEnd, (), ())

const char* ncclGetErrorString(ncclResult_t result) {
  static auto* real = resolve<const char*(ncclResult_t)>("ncclGetErrorString");
  if (real != nullptr) return real(result);
  thread_local std::string message;
  message = "NCCL unavailable: " + nccl_library().error();
  return message.c_str();
}

}  // extern "C"

#undef HALOGEN_NCCL_FORWARD

#endif  // HALOGEN_HAVE_NCCL
