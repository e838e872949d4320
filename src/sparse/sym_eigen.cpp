// sparse/sym_eigen.cpp — cyclic Jacobi (rotation formulas as in Numerical Recipes `jacobi`,
// applied to the full symmetric matrix so every access is a plain row/column update).
#include "sparse/sym_eigen.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hs {

Result<SymEigen> symmetric_eigen(std::vector<double> a, int n) {
  if (n <= 0 || a.size() != static_cast<size_t>(n) * n)
    return make_error(StatusCode::kInvalidArgument, "symmetric_eigen: {} values for n = {}", a.size(), n);
  for (double x : a)
    if (!std::isfinite(x)) return make_error(StatusCode::kInvalidArgument, "symmetric_eigen: non-finite input");
  auto A = [&](int r, int c) -> double& { return a[static_cast<size_t>(r) * n + c]; };
  for (int r = 0; r < n; ++r)  // symmetrize (accumulation order can leave 1-ulp asymmetry)
    for (int c = r + 1; c < n; ++c) A(r, c) = A(c, r) = 0.5 * (A(r, c) + A(c, r));

  std::vector<double> v(static_cast<size_t>(n) * n, 0.0);  // [n][n] accumulated rotations
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i) * n + i] = 1.0;
  auto V = [&](int r, int c) -> double& { return v[static_cast<size_t>(r) * n + c]; };

  double total = 0.0;
  for (double x : a) total += x * x;
  SymEigen out;
  constexpr int kMaxSweeps = 100;
  for (int sweep = 1;; ++sweep) {
    double off = 0.0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off += A(p, q) * A(p, q);
    if (off <= 1e-30 * total || off == 0.0) {
      out.sweeps = sweep - 1;
      break;
    }
    if (sweep > kMaxSweeps)
      return make_error(StatusCode::kInternal, "symmetric_eigen: no convergence after {} sweeps (n = {})", kMaxSweeps, n);
    // Early sweeps skip small elements (threshold), as in Numerical Recipes.
    const double thresh = sweep < 4 ? 0.2 * std::sqrt(off) / (static_cast<double>(n) * n) : 0.0;
    for (int p = 0; p < n - 1; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = A(p, q);
        const double g = 100.0 * std::fabs(apq);
        if (sweep > 4 && std::fabs(A(p, p)) + g == std::fabs(A(p, p)) && std::fabs(A(q, q)) + g == std::fabs(A(q, q))) {
          A(p, q) = A(q, p) = 0.0;
          continue;
        }
        if (std::fabs(apq) <= thresh || apq == 0.0) continue;
        const double h = A(q, q) - A(p, p);
        double t;
        if (std::fabs(h) + g == std::fabs(h)) {
          t = apq / h;
        } else {
          const double theta = 0.5 * h / apq;
          t = 1.0 / (std::fabs(theta) + std::sqrt(1.0 + theta * theta));
          if (theta < 0.0) t = -t;
        }
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = t * c, tau = s / (1.0 + c);
        A(p, p) -= t * apq;
        A(q, q) += t * apq;
        A(p, q) = A(q, p) = 0.0;
        for (int r = 0; r < n; ++r) {
          if (r == p || r == q) continue;
          const double arp = A(r, p), arq = A(r, q);
          A(r, p) = A(p, r) = arp - s * (arq + arp * tau);
          A(r, q) = A(q, r) = arq + s * (arp - arq * tau);
        }
        for (int r = 0; r < n; ++r) {
          const double vrp = V(r, p), vrq = V(r, q);
          V(r, p) = vrp - s * (vrq + vrp * tau);
          V(r, q) = vrq + s * (vrp - vrq * tau);
        }
      }
    }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return A(x, x) > A(y, y); });
  out.values.resize(n);
  out.vectors.assign(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    out.values[j] = A(order[j], order[j]);
    for (int r = 0; r < n; ++r) out.vectors[static_cast<size_t>(r) * n + j] = V(r, order[j]);
  }
  return out;
}

}  // namespace hs
