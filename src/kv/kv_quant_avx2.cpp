// kv/kv_quant_avx2.cpp — kv_quant_kernel.h compiled for AVX2 + FMA + F16C.
#include "kv/kv_quant_kernel.h"

namespace hs::kvq_detail {
KvQuantKernels kernels_avx2() { return make_kernels("avx2"); }
}  // namespace hs::kvq_detail
