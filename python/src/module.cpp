// SPDX-License-Identifier: Apache-2.0
// loom._native: what the Python package (python/loom/) reaches in libloom.
// Tensors cross as the torch.Tensor objects themselves (torch/extension.h's
// casters: the same TensorImpl, no copy). Calls that may block release the
// GIL; Loom's log waits in a queue that Python drains (log_queue.hpp).
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "communicator.hpp"
#include "log_queue.hpp"
#include "loom/host.hpp"
#include "loom/job.hpp"
#include "loom/plugin_json.hpp"
#include "loom/plugin_path.hpp"
#include "loom/status.hpp"
#include "loom/train/external_loop.hpp"
#include "loom/version.hpp"

namespace py = pybind11;
using loom::python::PyCommunicator;
using Session = loom::train::ExternalLoop;
using SessionSpec = loom::train::ExternalLoopSpec;

namespace {

std::vector<loom::train::NamedTensor> named(const std::vector<std::string>& names,
                                            const std::vector<torch::Tensor>& tensors, const char* what) {
  if (names.size() != tensors.size())
    throw loom::Error::usage(std::string(what) + ": " + std::to_string(names.size()) + " names for " +
                             std::to_string(tensors.size()) + " tensors");
  std::vector<loom::train::NamedTensor> out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], tensors[i]);
  return out;
}

std::string plugins_json(const std::vector<std::string>& plugin_path) {
  loom::HostConfig config;
  config.search_path = loom::plugin_search_path(plugin_path, {});
  loom::Host host(config, loom::JobInfo::from_environment());
  auto records = host.probe_all();
  return loom::plugin_listing_json(host, records);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "Loom's native core (libloom), for the loom package";
  m.attr("__version__") = LOOM_VERSION_STRING;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const loom::Error& e) {
      if (e.exit_code() == loom::Error::kUsage) {
        PyErr_SetString(PyExc_ValueError, e.what());
      } else {
        PyErr_SetString(PyExc_RuntimeError, e.what());
      }
    }
  });
  m.def("capture_logs", &loom::python::capture_logs, "Send Loom's log into the queue drain_logs() empties");
  m.def("drain_logs", &loom::python::drain_logs, "The queued log messages: [(logging level, text)]");
  m.def("plugins_json", &plugins_json, py::arg("plugin_path") = std::vector<std::string>{},
        py::call_guard<py::gil_scoped_release>(), "The plugin listing, as `loom plugins --json` prints it");

  py::class_<Session>(m, "Session")
      .def(py::init([](const std::string& strategy, const std::map<std::string, std::string>& options,
                       const std::string& collective, const std::map<std::string, std::string>& collective_options,
                       const std::vector<std::string>& plugin_path, const std::string& task,
                       const std::vector<std::string>& param_names, const std::vector<torch::Tensor>& params,
                       const std::vector<std::string>& buffer_names, const std::vector<torch::Tensor>& buffers,
                       const std::string& optimizer, double momentum, int64_t batch_size, int64_t max_steps,
                       const std::string& other_optimizer) {
             SessionSpec spec;
             spec.strategy = strategy;
             spec.options = options;
             spec.options_from = "loom.Optimizer";
             spec.collective = collective;
             spec.collective_options = collective_options;
             spec.plugin_path = plugin_path;
             spec.task = task;
             spec.params = named(param_names, params, "parameters");
             spec.buffers = named(buffer_names, buffers, "buffers");
             spec.optimizer = optimizer;
             spec.momentum = momentum;
             spec.other_optimizer = other_optimizer;
             spec.batch_size = batch_size;
             spec.max_steps = max_steps;
             py::gil_scoped_release release;
             return std::make_unique<Session>(std::move(spec));
           }),
           py::arg("strategy"), py::arg("options"), py::arg("collective"), py::arg("collective_options"),
           py::arg("plugin_path"), py::arg("task"), py::arg("param_names"), py::arg("params"), py::arg("buffer_names"),
           py::arg("buffers"), py::arg("optimizer"), py::arg("momentum"), py::arg("batch_size"), py::arg("max_steps"),
           py::arg("other_optimizer") = "")
      .def("optimizer_statistics", &Session::optimizer_statistics)
      .def("share_step_counters", &Session::share_step_counters)
      .def("setup", &Session::setup, py::call_guard<py::gil_scoped_release>())
      .def("after_backward", &Session::after_backward, py::arg("samples"), py::arg("loss") = py::none(),
           py::call_guard<py::gil_scoped_release>())
      .def("after_optimizer_step", &Session::after_optimizer_step, py::call_guard<py::gil_scoped_release>())
      .def("load_state_from_peers",
           [](Session& self) {
             std::string why;
             bool loaded = false;
             {
               py::gil_scoped_release release;
               loaded = self.load_state_from_peers(&why);
             }
             return py::make_tuple(loaded, why);
           })
      .def("zero_grads", &Session::zero_grads)
      .def("grads_finite", &Session::grads_finite)
      .def("global_step", &Session::global_step)
      .def("should_stop", &Session::should_stop)
      .def("status_line", &Session::status_line)
      .def("description", &Session::description)
      .def("teardown", &Session::teardown, py::call_guard<py::gil_scoped_release>());

  py::class_<PyCommunicator>(m, "Communicator")
      .def(py::init<const std::string&, const std::map<std::string, std::string>&, const std::vector<std::string>&,
                    double>(),
           py::arg("name"), py::arg("options"), py::arg("plugin_path"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("rank", &PyCommunicator::rank)
      .def_property_readonly("size", &PyCommunicator::size)
      .def("allreduce", &PyCommunicator::allreduce, py::arg("tensor"), py::arg("op"),
           py::call_guard<py::gil_scoped_release>())
      .def("broadcast", &PyCommunicator::broadcast, py::arg("tensor"), py::arg("root"),
           py::call_guard<py::gil_scoped_release>())
      .def("barrier", &PyCommunicator::barrier, py::call_guard<py::gil_scoped_release>());
}
