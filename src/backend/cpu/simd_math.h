// backend/cpu/simd_math.h — the CPU kernels see core/simd_math.h's helpers as cpu::detail::.
#pragma once

#include "core/simd_math.h"

namespace hs::cpu::detail {
using namespace hs::simd;  // NOLINT(google-build-using-namespace): internal-linkage helpers, one copy per ISA
}  // namespace hs::cpu::detail
