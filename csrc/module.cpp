// The Python module flashattn._C: importing it registers every op implementation of this
// extension (the TORCH_LIBRARY_IMPL blocks of csrc/binding*.cpp and csrc/autograd.cpp); the
// module itself holds how it was built and the setter of the switch the C++ autograd reads.
#include <cuda_runtime_api.h>
#include <torch/extension.h>

#include <map>
#include <string>

#include "autograd.h"

#define FLASHATTN_STR2(x) #x
#define FLASHATTN_STR(x) FLASHATTN_STR2(x)

namespace {

std::map<std::string, std::string> build_info() {
  return {
      {"cuda_archs", FLASHATTN_STR(FLASHATTN_ARCHS)},
      {"nvcc", FLASHATTN_STR(FLASHATTN_NVCC_VERSION)},
      {"torch", FLASHATTN_STR(FLASHATTN_TORCH_VERSION)},
      {"cuda_runtime", std::to_string(CUDART_VERSION)},
  };
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashattn CUDA kernels (the ops are registered under torch.ops.flashattn)";
  m.def("build_info", &build_info, "How this extension was built");
  m.def("set_deterministic", &flashattn::set_deterministic,
        "The deterministic switch of the ops' autograd (flashattn.set_deterministic sets it)");
  m.def("get_deterministic", &flashattn::get_deterministic, "The deterministic switch of the ops' autograd");
}
