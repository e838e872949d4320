// sparse/sym_eigen.h — eigen-decomposition of a small dense symmetric matrix (cyclic Jacobi).
//
// Used by the sketch fitter on key second-moment matrices (n = head_dim <= 256). Jacobi is
// chosen for robustness and accuracy (orthonormal eigenvectors to machine precision, small
// eigenvalues with high relative accuracy), not speed: each sweep costs ~6 n^3 flops and it
// converges quadratically in ~6-10 sweeps — about 0.1-0.5 s for n = 256, paid once per
// (layer, kv head) when a sketch is fitted offline.
#pragma once

#include <vector>

#include "core/status.h"

namespace hs {

struct SymEigen {
  std::vector<double> values;   // [n] eigenvalues, descending
  std::vector<double> vectors;  // [n][n] row-major; column j is the unit eigenvector of values[j]
  int sweeps = 0;               // Jacobi sweeps used
};

// a: [n][n] row-major, symmetric (only its symmetric part is used). Internal error if it has
// not converged after 100 sweeps (does not happen for finite input) or holds NaN/inf.
Result<SymEigen> symmetric_eigen(std::vector<double> a, int n);

}  // namespace hs
