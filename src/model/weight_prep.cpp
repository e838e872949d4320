// model/weight_prep.cpp — host_matrix, prepare_matrix, prepare_group (weight_prep.h).
#include "model/weight_prep.h"

#include <vector>

namespace hs {

Tensor host_matrix(const WeightView& w) { return Tensor::matrix(w.data, w.type, w.n_out, w.n_in); }

Status prepare_matrix(Backend& b, const WeightView& w, const std::string& name, Tensor& out) {
  HS_ASSIGN_OR_RETURN(out, b.prepare_weight(host_matrix(w), name));
  return Status::ok();
}

Status prepare_group(Backend& b, std::initializer_list<const WeightView*> w, std::initializer_list<std::string> names,
                     std::initializer_list<Tensor*> out) {
  std::vector<Tensor> hosts;
  for (const WeightView* v : w) hosts.push_back(host_matrix(*v));
  const std::vector<std::string> nm(names);
  HS_ASSIGN_OR_RETURN(std::vector<Tensor> dev, b.prepare_weight_group(hosts, nm));
  size_t i = 0;
  for (Tensor* t : out) *t = dev[i++];
  return Status::ok();
}

}  // namespace hs
