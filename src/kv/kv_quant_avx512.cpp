// kv/kv_quant_avx512.cpp — kv_quant_kernel.h compiled for AVX-512.
#include "kv/kv_quant_kernel.h"

namespace hs::kvq_detail {
KvQuantKernels kernels_avx512() { return make_kernels("avx512"); }
}  // namespace hs::kvq_detail
