// The native warm path of convwgrad.conv_weight: call signature -> prepared call, in C++.
//
// Why: a Python warm path (key from the tensors' metadata, the planning-context check, the capture
// check, the prepared call) costs 10-22 us of host CPU a call on the GPU machine's host over the
// kernels it launches (tools/host_overhead.py --paired, session 14); the same steps here cost well
// under a microsecond. Each step mirrors dispatch.py's Python warm path, which stays the reference:
//   - the key: both tensors' sizes, strides, dtype and device, and the arguments as exact ints
//     (bool and float are not ints; anything else is not kept here and goes to Python);
//   - the planning context: the process-wide plugin manager, its plugins (by identity, in order),
//     torch's cuDNN TF32 switch, plan()'s epoch and the planning environment variables; when any
//     of them changes, every kept call is dropped (dispatch._planning_context reads the same);
//   - a CUDA input while the current stream captures a graph is a miss: Python plans graph launches;
//     so is any call while a TorchFunctionMode is active (it must see what the Python path does).
// A kept call is either a whole aten dW (the aten fallback family's bound launch: made here,
// through ATen, with the GIL released as torch's own bindings do) or the Python prepared call,
// called with the same arguments dispatch.py passes it. A miss returns None: the caller takes the
// Python path, which prepares the call and keeps it here too.
//
// Everything runs with the GIL held, except the aten call, which holds its own reference to its
// entry. The state is never destroyed: it holds Python references, and a C++ destructor at exit
// would run after the interpreter is gone.

#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>  // AutoGradMode: torch 2.11's ATen.h does not bring it in
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& key) const noexcept {
    uint64_t hash = 1469598103934665603ull;
    for (int64_t value : key) {
      hash ^= static_cast<uint64_t>(value) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    }
    return static_cast<size_t>(hash);
  }
};

// Tags in a key, so that an int, a sequence and a nested sequence never encode alike.
constexpr int64_t kIntTag = -1;
constexpr int64_t kSequenceTag = -2;
constexpr int64_t kTensorTag = -3;
constexpr int64_t kProblemTag = -4;
// Nesting the Python key allows that is kept here: (before, after) padding pairs are depth 2.
constexpr int kMaxDepth = 2;

struct Entry {
  bool aten = false;
  PyObject* prepared = nullptr;  // a strong reference (Python entries)
  PyObject* owners = nullptr;    // dispatch_conv_grouped's (problem, plan): kept alive, so their ids stay theirs
  std::vector<int64_t> weight_size, weight_strides, stride, padding, dilation, output_padding;
  int64_t groups = 1;
  ~Entry() {
    Py_XDECREF(prepared);
    Py_XDECREF(owners);
  }  // entries are dropped with the GIL held (clear, replace)
};

struct Context {
  bool valid = false;
  PyObject* manager = nullptr;     // strong
  std::vector<PyObject*> plugins;  // strong
  bool tf32 = false;
  long long epoch = 0;
  std::vector<std::optional<std::string>> environment;
};

struct State {
  bool configured = false;
  PyObject* manager_globals = nullptr;  // the globals of the module holding the process-wide manager
  PyObject* manager_name = nullptr;     // its name there
  PyObject* plugins_attr = nullptr;     // the manager's name -> plugin dict (pluggy's _name2plugin)
  PyObject* plan_globals = nullptr;     // the globals of the module holding plan()'s epoch
  PyObject* epoch_name = nullptr;
  PyObject* capturing = nullptr;       // () -> bool for the current CUDA stream, or nullptr
  std::vector<std::string> environment_names;
  size_t max_calls = 4096;
  Context context;
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> calls;
  unsigned long long hits = 0, misses = 0, context_changes = 0;
};

State* const state = new State();  // never destroyed (see the header)

// Dropping runs Python (an entry's prepared call, a manager's weakref callbacks), which may call
// back in here or switch threads: the state is reset first, and what it held is let go after.
void drop_context() {
  Context old = std::move(state->context);
  state->context = Context();
  Py_XDECREF(old.manager);
  for (PyObject* plugin : old.plugins) Py_XDECREF(plugin);
}

void drop_calls() {
  auto old = std::move(state->calls);
  state->calls = decltype(state->calls)();
}  // ``old`` and its entries go here, after the table is whole again

std::optional<std::string> environment_value(const std::string& name) {
  const char* value = std::getenv(name.c_str());  // os.environ writes through putenv/unsetenv
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

// 1: the kept calls hold; 0: the context changed (the kept calls were dropped, the new context is
// kept); -1: no usable context (no manager yet, one without pluggy's plugin table, or a TF32 reading
// torch refuses): a miss.
int check_context() {
  bool tf32;
  try {
    tf32 = at::globalContext().allowTF32CuDNN();
  } catch (const std::exception&) {  // the legacy and per-operator TF32 APIs mixed: Python's reading decides
    return -1;
  }
  PyObject* manager = PyDict_GetItemWithError(state->manager_globals, state->manager_name);  // borrowed
  if (manager == nullptr || manager == Py_None) {
    PyErr_Clear();
    return -1;
  }
  Py_INCREF(manager);
  PyObject* plugins = PyObject_GetAttr(manager, state->plugins_attr);
  PyObject* epoch_object = PyDict_GetItemWithError(state->plan_globals, state->epoch_name);  // borrowed
  long long epoch = epoch_object == nullptr ? -1 : PyLong_AsLongLong(epoch_object);
  if (plugins == nullptr || !PyDict_CheckExact(plugins) || epoch_object == nullptr || PyErr_Occurred()) {
    PyErr_Clear();
    Py_XDECREF(plugins);
    Py_DECREF(manager);
    return -1;
  }
  Context& c = state->context;
  bool same = c.valid && manager == c.manager && tf32 == c.tf32 && epoch == c.epoch &&
              static_cast<size_t>(PyDict_GET_SIZE(plugins)) == c.plugins.size();
  if (same) {
    Py_ssize_t position = 0;
    PyObject *name, *plugin;
    size_t i = 0;
    while (PyDict_Next(plugins, &position, &name, &plugin)) {
      if (plugin != c.plugins[i++]) {
        same = false;
        break;
      }
    }
  }
  for (size_t i = 0; same && i < state->environment_names.size(); ++i) {
    same = environment_value(state->environment_names[i]) == c.environment[i];
  }
  if (same) {
    Py_DECREF(plugins);
    Py_DECREF(manager);
    return 1;
  }
  drop_calls();
  drop_context();
  ++state->context_changes;
  c.manager = manager;  // the reference taken above
  Py_ssize_t position = 0;
  PyObject *name, *plugin;
  while (PyDict_Next(plugins, &position, &name, &plugin)) {
    Py_INCREF(plugin);
    c.plugins.push_back(plugin);
  }
  Py_DECREF(plugins);
  c.tf32 = tf32;
  c.epoch = epoch;
  for (const std::string& variable : state->environment_names) c.environment.push_back(environment_value(variable));
  c.valid = true;
  return 0;
}

bool is_sequence(PyObject* value) {
  return PyTuple_CheckExact(value) || PyList_CheckExact(value) || THPSize_Check(value);
}

// Appends ``value`` (an exact int, or a sequence of them nested at most kMaxDepth deep) to the key;
// false for anything else (the Python key validates it on every call, or keeps it its own way).
bool push_ints(Key& key, PyObject* value, int depth = 0) {
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    long long item = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (item == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    key.push_back(kIntTag);
    key.push_back(item);
    return true;
  }
  if (depth >= kMaxDepth || !is_sequence(value)) return false;
  PyObject* items = PySequence_Fast(value, "");  // a tuple or list: no copy
  if (items == nullptr) {
    PyErr_Clear();
    return false;
  }
  const Py_ssize_t length = PySequence_Fast_GET_SIZE(items);
  key.push_back(kSequenceTag);
  key.push_back(length);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < length; ++i) ok = push_ints(key, PySequence_Fast_GET_ITEM(items, i), depth + 1);
  Py_DECREF(items);
  return ok;
}

// A plain strided tensor's metadata (sizes, strides, dtype, device); false for a subclass (fake,
// functional and other wrappers), a nested, sparse or symbolic-shaped tensor: not kept here.
bool push_tensor(Key& key, PyObject* object) {
  if (Py_TYPE(object) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return false;
  const at::Tensor& tensor = THPVariable_Unpack(object);
  if (!tensor.defined() || tensor.layout() != at::kStrided || tensor.is_nested() ||
      tensor.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  key.push_back(kTensorTag);
  key.push_back(tensor.dim());
  for (int64_t size : tensor.sizes()) key.push_back(size);
  for (int64_t stride : tensor.strides()) key.push_back(stride);
  key.push_back(static_cast<int64_t>(tensor.scalar_type()));
  key.push_back(static_cast<int64_t>(tensor.device().type()));
  key.push_back(tensor.device().index());
  return true;
}

// The key of (input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts),
// args[0..7]; false where the call is not one kept here.
bool make_key(PyObject* const* args, Key& key) {
  key.reserve(64);
  if (!push_tensor(key, args[0]) || !push_tensor(key, args[1])) return false;
  for (int i = 2; i < 7; ++i) {
    if (!push_ints(key, args[i])) return false;
  }
  if (args[7] != Py_True && args[7] != Py_False) return false;  // the Python key hashes the object itself
  key.push_back(args[7] == Py_True);
  return true;
}

// An int (a subclass too: ConvProblem admits IntEnum members) as int64; false on overflow or a non-int.
bool int_value(PyObject* value, int64_t& out) {
  if (!PyLong_Check(value) || PyBool_Check(value)) return false;
  int overflow = 0;
  out = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow != 0 || (out == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool int_vector(PyObject* value, std::vector<int64_t>& out) {
  if (!PyTuple_Check(value) && !PyList_Check(value)) return false;
  PyObject* items = PySequence_Fast(value, "");
  if (items == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(items); ++i) {
    int64_t item = 0;
    ok = int_value(PySequence_Fast_GET_ITEM(items, i), item);
    if (ok) out.push_back(item);
  }
  Py_DECREF(items);
  return ok;
}

// dW exactly as blocks/aten.py's bound launch of an aten call computes it: aten's weight gradient
// with a zero-stride stand-in for the weight (aten reads its shape, never its values), no autograd
// graph (the Python path detaches inputs that require grad), and a contiguous result.
at::Tensor aten_weight_grad(const Entry& entry, const at::Tensor& input, const at::Tensor& grad_output) {
  c10::AutoGradMode no_graph(false);
  at::Tensor weight = grad_output.as_strided(entry.weight_size, entry.weight_strides);
  at::Tensor grad_weight = std::get<1>(at::convolution_backward(
      grad_output, input, weight, std::nullopt, entry.stride, entry.padding, entry.dilation, false,
      entry.output_padding, entry.groups, {false, true, false}));
  return grad_weight.is_contiguous() ? grad_weight : grad_weight.contiguous();
}

PyObject* type_error(const char* message) {
  PyErr_SetString(PyExc_TypeError, message);
  return nullptr;
}

// configure(manager_globals, manager_name, plugins_attr, plan_globals, epoch_name, environment_names,
//           capturing, max_calls): the module globals (dicts) where the manager and the epoch live
PyObject* configure(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 8) return type_error("configure takes 8 arguments");
  for (int i : {1, 2, 4}) {
    if (!PyUnicode_Check(args[i])) return type_error("attribute names must be str");
  }
  if (!PyDict_Check(args[0]) || !PyDict_Check(args[3])) return type_error("module globals must be dicts");
  std::vector<std::string> names;
  PyObject* items = PySequence_Fast(args[5], "environment_names must be a sequence of str");
  if (items == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); ++i) {
    const char* name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(items, i));
    if (name == nullptr) {
      Py_DECREF(items);
      return nullptr;
    }
    names.emplace_back(name);
  }
  Py_DECREF(items);
  const long long max_calls = PyLong_AsLongLong(args[7]);
  if (max_calls < 1) return PyErr_Occurred() ? nullptr : type_error("max_calls must be >= 1");
  drop_calls();
  drop_context();
  PyObject* values[6] = {args[0], args[1], args[2], args[3], args[4], args[6] == Py_None ? nullptr : args[6]};
  PyObject** slots[6] = {&state->manager_globals, &state->manager_name, &state->plugins_attr,
                         &state->plan_globals, &state->epoch_name, &state->capturing};
  for (int i = 0; i < 6; ++i) {
    PyObject* old = *slots[i];
    Py_XINCREF(values[i]);
    *slots[i] = values[i];
    Py_XDECREF(old);
  }
  state->environment_names = std::move(names);
  state->max_calls = static_cast<size_t>(max_calls);
  state->configured = true;
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// The kept call of ``key`` run on (input, grad_output), the Python one with (out=None,
// workspace=None, keep_workspace); None where there is none or the current stream captures.
PyObject* run_kept(const Key& key, PyObject* input_object, PyObject* grad_output_object, PyObject* keep_workspace) {
  // a TorchFunctionMode sees the Python path's tensor queries and torch.ops calls; an ATen call would bypass it
  if (at::impl::torch_function_mode_enabled() || check_context() != 1) {
    ++state->misses;
    Py_RETURN_NONE;
  }
  auto found = state->calls.find(key);
  if (found == state->calls.end()) {
    ++state->misses;
    Py_RETURN_NONE;
  }
  std::shared_ptr<Entry> entry = found->second;  // held: the capture query below may run Python
  const at::Tensor& input = THPVariable_Unpack(input_object);
  if (state->capturing != nullptr && input.is_cuda()) {
    PyObject* capturing = PyObject_CallNoArgs(state->capturing);
    if (capturing == nullptr) return nullptr;
    const int is_capturing = PyObject_IsTrue(capturing);
    Py_DECREF(capturing);
    if (is_capturing != 0) {
      ++state->misses;
      if (is_capturing < 0) return nullptr;
      Py_RETURN_NONE;
    }
  }
  ++state->hits;
  if (entry->aten) {
    const at::Tensor& grad_output = THPVariable_Unpack(grad_output_object);
    at::Tensor grad_weight;
    {
      pybind11::gil_scoped_release no_gil;
      grad_weight = aten_weight_grad(*entry, input, grad_output);
    }
    return THPVariable_Wrap(std::move(grad_weight));
  }
  PyObject* call_args[5] = {input_object, grad_output_object, Py_None, Py_None, keep_workspace};
  return PyObject_Vectorcall(entry->prepared, call_args, keep_workspace == nullptr ? 2 : 5, nullptr);
}

// call(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts,
//      keep_workspace) -> dW, or None (a miss: take the Python path)
PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 9) return type_error("call takes 9 arguments");
  Key key;
  if (!state->configured || !make_key(args, key)) {
    ++state->misses;
    Py_RETURN_NONE;
  }
  return run_kept(key, args[0], args[1], args[8]);
  END_HANDLE_TH_ERRORS
}

// dispatch_conv_grouped's key: the problem and plan objects by identity (the entry keeps them alive),
// then both tensors.
bool make_problem_key(PyObject* const* args, Key& key) {
  key.reserve(48);
  key.push_back(kProblemTag);
  key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(args[0])));
  key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(args[1])));
  return push_tensor(key, args[2]) && push_tensor(key, args[3]);
}

// call_problem(problem, plan, input, grad_output) -> dW, or None: dispatch_conv_grouped without
// out= or workspace=, for the problem and plan objects it was kept with.
PyObject* call_problem(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 4) return type_error("call_problem takes 4 arguments");
  Key key;
  if (!state->configured || !make_problem_key(args, key)) {
    ++state->misses;
    Py_RETURN_NONE;
  }
  return run_kept(key, args[2], args[3], nullptr);
  END_HANDLE_TH_ERRORS
}

// keep(input, grad_output, weight_size, stride, padding, dilation, groups, match_layouts, prepared,
//      aten_call) -> bool: whether it was kept. ``aten_call`` is None (call ``prepared``) or
// (weight_size, stride, padding, dilation, groups): prepared's run is exactly that aten dW.
// An entry for ``prepared`` (Python) or, where ``aten_call`` is not None, for that aten call; null
// with a TypeError set for a malformed call, null with none set for values it cannot hold (overflow).
std::shared_ptr<Entry> make_entry(PyObject* prepared, PyObject* aten_call) {
  auto entry = std::make_shared<Entry>();
  if (aten_call != Py_None) {
    if (!PyTuple_CheckExact(aten_call) || PyTuple_GET_SIZE(aten_call) != 5) {
      type_error("aten_call must be (weight_size, stride, padding, dilation, groups)");
      return nullptr;
    }
    if (!int_vector(PyTuple_GET_ITEM(aten_call, 0), entry->weight_size) ||
        !int_vector(PyTuple_GET_ITEM(aten_call, 1), entry->stride) ||
        !int_vector(PyTuple_GET_ITEM(aten_call, 2), entry->padding) ||
        !int_vector(PyTuple_GET_ITEM(aten_call, 3), entry->dilation) ||
        !int_value(PyTuple_GET_ITEM(aten_call, 4), entry->groups)) {
      return nullptr;  // not kept: the Python path serves it
    }
    entry->weight_strides.assign(entry->weight_size.size(), 0);
    entry->output_padding.assign(entry->stride.size(), 0);
    entry->aten = true;
  } else {
    if (!PyCallable_Check(prepared)) {
      type_error("prepared must be callable");
      return nullptr;
    }
    Py_INCREF(prepared);
    entry->prepared = prepared;
  }
  return entry;
}

PyObject* store(Key&& key, std::shared_ptr<Entry> entry) {
  if (entry == nullptr) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_FALSE;
  }
  if (check_context() < 0) Py_RETURN_FALSE;  // (a changed context was dropped: this call is of the new one)
  if (state->calls.size() >= state->max_calls) drop_calls();  // as dispatch.PREPARED_CALLS_SIZE
  std::shared_ptr<Entry>& slot = state->calls[std::move(key)];
  slot.swap(entry);
  Py_RETURN_TRUE;
}  // a replaced entry goes here, with the table whole

PyObject* keep(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 10) return type_error("keep takes 10 arguments");
  Key key;
  if (!state->configured || !make_key(args, key)) Py_RETURN_FALSE;
  return store(std::move(key), make_entry(args[8], args[9]));
  END_HANDLE_TH_ERRORS
}

// keep_problem(problem, plan, input, grad_output, prepared, aten_call) -> bool
PyObject* keep_problem(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 6) return type_error("keep_problem takes 6 arguments");
  Key key;
  if (!state->configured || !make_problem_key(args, key)) Py_RETURN_FALSE;
  std::shared_ptr<Entry> entry = make_entry(args[4], args[5]);
  if (entry != nullptr) entry->owners = PyTuple_Pack(2, args[0], args[1]);
  return store(std::move(key), std::move(entry));
  END_HANDLE_TH_ERRORS
}

PyObject* clear(PyObject*, PyObject*) {
  drop_calls();
  Py_RETURN_NONE;
}

// stats() -> (hits, misses, kept calls, context changes)
PyObject* stats(PyObject*, PyObject*) {
  return Py_BuildValue("(KKnK)", state->hits, state->misses, static_cast<Py_ssize_t>(state->calls.size()),
                       state->context_changes);
}

// ------------------------------------------------------------------ the routed layer's native backward
//
// Why: a patched layer routed to a convwgrad family ran its backward in Python (EagerConv): inside
// autograd's engine thread that cost ~425 us of host time a layer on the H100 machine's host against
// 10-20 us its kernels saved (tools/step_host.py, session 21). Here the layer is a C++ autograd
// function: the forward is at::convolution, the backward takes dX and the bias gradient from
// at::convolution_backward and launches dW's kernels itself with cuLaunchKernel, from a launch the
// Python path described once per signature (``install``): no Python and no GIL on the warm path.
// Anything the description does not cover goes to the Python fallback (configured), which computes
// dW through the dispatcher, exactly as before, and installs a description for the next call:
//   - no description yet, or one made in another planning context (checked at the forward);
//   - a saved input, grad_output or weight whose dtype, sizes, strides or device differ from it;
//   - operands not aligned as the chosen kernels need;
//   - a stream that captures a CUDA graph (Python plans graph launches), an open record_launches
//     log (Python records), convwgrad switched off on the backward's thread;
//   - no CUDA driver entry points (a CPU tensor always takes the fallback).

using CUresultValue = int;
using LaunchKernelFunction = CUresultValue (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, void*, void**, void**);
using StreamIsCapturingFunction = CUresultValue (*)(void*, int*);

struct DriverApi {
  LaunchKernelFunction launch = nullptr;
  StreamIsCapturingFunction is_capturing = nullptr;
};

// The driver's entry points from libcuda.so.1 (loaded by torch once CUDA is initialised); nullptrs
// where it is not there (a CPU machine): every backward then takes the fallback.
const DriverApi& driver_api() {
  static const DriverApi api = [] {
    DriverApi found;
    void* library = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr) library = dlopen("libcuda.so.1", RTLD_LAZY);
    if (library != nullptr) {
      found.launch = reinterpret_cast<LaunchKernelFunction>(dlsym(library, "cuLaunchKernel"));
      found.is_capturing = reinterpret_cast<StreamIsCapturingFunction>(dlsym(library, "cuStreamIsCapturing"));
    }
    return found;
  }();
  return api;
}

// Where a kernel parameter's value comes from.
enum ParamSource : int64_t { kLiteral = 0, kInput = 1, kGradOutput = 2, kWorkspace = 3, kOut = 4 };

struct Param {
  int64_t source = kLiteral;
  int64_t nbytes = 8;
  uint64_t value = 0;  // a literal's bits (little-endian: a 4-byte parameter is its low half)
};

// One kernel launch; a stage lists the launches it may take, the first whose alignment the operands meet.
struct Launch {
  void* function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  uint64_t input_alignment = 1, grad_output_alignment = 1;
  std::vector<Param> params;
};

// dW of one call signature as launches: bound to the tensors' metadata it was described for.
struct NativeWeightGrad {
  int64_t device_index = -1;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> input_sizes, input_strides, grad_output_sizes, grad_output_strides, weight_sizes,
      weight_strides, out_strides;
  int64_t workspace_nbytes = 0;
  unsigned long long context = 0;  // state->context_changes when it was installed
  std::vector<std::vector<Launch>> stages;
};

// A patched layer's memo: the description its backward installed (read and written with the GIL held).
struct Memo {
  int64_t key = 0;  // the Python route's memo, in the fallback's table (frameworks.torch_ops)
  std::shared_ptr<const NativeWeightGrad> weight_grad;
};

std::atomic<bool> poison{false};      // tests: NaN in dW and the workspace before the launches
std::atomic<long long> open_logs{0};  // record_launches logs open, as dispatch.py tells
std::atomic<unsigned long long> native_backwards{0}, fallback_backwards{0};
bool enabled_by_default = true;
thread_local int thread_enabled = -1;  // -1: the default; set_enabled's value on this thread otherwise
PyObject* fallback = nullptr;          // (memo key, input, grad_output, weight, stride, padding, dilation, groups) -> dW

bool same(c10::IntArrayRef values, const std::vector<int64_t>& expected) {
  return values.size() == expected.size() && std::equal(values.begin(), values.end(), expected.begin());
}

// The current stream of ``device`` as the driver's handle, or false where torch cannot say.
bool current_stream(const c10::Device& device, void*& stream) {
  try {
    const c10::impl::DeviceGuardImplInterface* guard = c10::impl::getDeviceGuardImpl(device.type());
    stream = guard->getStreamNativeHandle(guard->getStream(device));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// dW by the described launches; an undefined tensor where they cannot run (nothing launched then).
at::Tensor run_native(const NativeWeightGrad& dw, const at::Tensor& input, const at::Tensor& grad_output,
                      const at::Tensor& weight) {
  const DriverApi& api = driver_api();
  if (api.launch == nullptr || api.is_capturing == nullptr || !input.is_cuda() ||
      input.device().index() != dw.device_index || input.scalar_type() != dw.dtype ||
      grad_output.scalar_type() != dw.dtype || !same(input.sizes(), dw.input_sizes) ||
      !same(input.strides(), dw.input_strides) || !same(grad_output.sizes(), dw.grad_output_sizes) ||
      !same(grad_output.strides(), dw.grad_output_strides) || !same(weight.sizes(), dw.weight_sizes) ||
      !same(weight.strides(), dw.weight_strides) || open_logs.load() != 0 ||
      !(thread_enabled < 0 ? enabled_by_default : thread_enabled != 0)) {
    return at::Tensor();
  }
  const auto input_pointer = reinterpret_cast<uint64_t>(input.data_ptr());
  const auto grad_output_pointer = reinterpret_cast<uint64_t>(grad_output.data_ptr());
  std::vector<const Launch*> chosen;
  for (const auto& stage : dw.stages) {
    const Launch* pick = nullptr;
    for (const auto& launch : stage) {
      if (input_pointer % launch.input_alignment == 0 && grad_output_pointer % launch.grad_output_alignment == 0) {
        pick = &launch;
        break;
      }
    }
    if (pick == nullptr) return at::Tensor();
    chosen.push_back(pick);
  }
  c10::DeviceGuard device_guard(input.device());
  void* stream = nullptr;
  int capture_status = 1;
  if (!current_stream(input.device(), stream) || api.is_capturing(stream, &capture_status) != 0 ||
      capture_status != 0) {
    return at::Tensor();  // capturing (or unknown): Python plans graph launches
  }
  at::Tensor workspace;
  if (dw.workspace_nbytes > 0) workspace = at::empty({dw.workspace_nbytes}, input.options().dtype(at::kByte));
  at::Tensor out = at::empty_strided(dw.weight_sizes, dw.out_strides, input.options());
  if (poison.load()) {  // every byte 0xff: NaN in fp32, fp16 and bf16 alike
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    if (workspace.defined()) workspace.fill_(255);
  }
  const uint64_t pointers[5] = {0, input_pointer, grad_output_pointer,
                                workspace.defined() ? reinterpret_cast<uint64_t>(workspace.data_ptr()) : 0,
                                reinterpret_cast<uint64_t>(out.data_ptr())};
  for (const Launch* launch : chosen) {
    std::vector<uint64_t> values(launch->params.size());
    std::vector<void*> addresses(launch->params.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const Param& param = launch->params[i];
      values[i] = param.source == kLiteral ? param.value : pointers[param.source];
      addresses[i] = &values[i];
    }
    const CUresultValue error =
        api.launch(launch->function, launch->grid[0], launch->grid[1], launch->grid[2], launch->block[0],
                   launch->block[1], launch->block[2], launch->shared_bytes, stream, addresses.data(), nullptr);
    TORCH_CHECK(error == 0, "convwgrad: a routed layer's dW launch failed: cuLaunchKernel returned ", error);
  }
  return out;
}

// dW with the weight's strides, as stock torch hands it back (torch_ops._in_layout_of)
at::Tensor in_layout_of(const at::Tensor& weight, const at::Tensor& grad_weight) {
  if (grad_weight.strides() == weight.strides()) return grad_weight;
  bool same_but_unit_dims = true;
  for (int64_t d = 0; d < weight.dim(); ++d) {
    if (weight.size(d) > 1 && weight.stride(d) != grad_weight.stride(d)) same_but_unit_dims = false;
  }
  if (same_but_unit_dims) return grad_weight.as_strided(weight.sizes(), weight.strides());
  return at::empty_like(weight, grad_weight.options()).copy_(grad_weight);
}

struct MemoHolder : torch::CustomClassHolder {
  std::shared_ptr<Memo> memo;
  std::shared_ptr<const NativeWeightGrad> weight_grad;  // the forward's pick
};

void release_memo_capsule(PyObject* capsule) {
  delete static_cast<std::shared_ptr<Memo>*>(PyCapsule_GetPointer(capsule, "convwgrad.memo"));
}

PyObject* memo_capsule(const std::shared_ptr<Memo>& memo) {
  auto* held = new std::shared_ptr<Memo>(memo);
  PyObject* capsule = PyCapsule_New(held, "convwgrad.memo", release_memo_capsule);
  if (capsule == nullptr) delete held;
  return capsule;
}

PyObject* int_list(const std::vector<int64_t>& values) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(values.size()));
  for (size_t i = 0; list != nullptr && i < values.size(); ++i) {
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(values[i]));
  }
  return list;
}

// dW from the Python fallback (the GIL taken here, on autograd's thread).
at::Tensor fallback_weight_grad(const std::shared_ptr<Memo>& memo, const at::Tensor& input,
                                const at::Tensor& grad_output, const at::Tensor& weight,
                                const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                const std::vector<int64_t>& dilation, int64_t groups) {
  pybind11::gil_scoped_acquire gil;
  TORCH_CHECK(fallback != nullptr, "convwgrad: the native backward has no fallback configured");
  PyObject* args[8] = {PyLong_FromLongLong(memo->key), THPVariable_Wrap(input), THPVariable_Wrap(grad_output),
                       THPVariable_Wrap(weight), int_list(stride), int_list(padding), int_list(dilation),
                       PyLong_FromLongLong(groups)};
  PyObject* result = nullptr;
  if (std::all_of(std::begin(args), std::end(args), [](PyObject* a) { return a != nullptr; })) {
    result = PyObject_Vectorcall(fallback, args, 8, nullptr);
  }
  for (PyObject* arg : args) Py_XDECREF(arg);
  if (result == nullptr) {
    python_error error;
    error.persist();
    throw error;
  }
  if (!THPVariable_Check(result)) {
    Py_DECREF(result);
    TORCH_CHECK(false, "convwgrad: the native backward's fallback returned no tensor");
  }
  at::Tensor grad_weight = THPVariable_Unpack(result);
  Py_DECREF(result);
  return grad_weight;
}

struct RoutedConv : public torch::autograd::Function<RoutedConv> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, const std::vector<int64_t>& stride,
                            const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups,
                            const c10::intrusive_ptr<MemoHolder>& holder) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    ctx->saved_data["dilation"] = dilation;
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    ctx->saved_data["memo"] = c10::IValue::make_capsule(holder);
    const std::vector<int64_t> output_padding(stride.size(), 0);
    return at::convolution(input, weight, bias, stride, padding, dilation, false, output_padding, groups);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &grad_output = grad_outputs[0];
    const auto stride = ctx->saved_data["stride"].toIntVector();
    const auto padding = ctx->saved_data["padding"].toIntVector();
    const auto dilation = ctx->saved_data["dilation"].toIntVector();
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto holder = c10::static_intrusive_pointer_cast<MemoHolder>(ctx->saved_data["memo"].toCapsule());
    const bool wants_input = ctx->needs_input_grad(0), wants_weight = ctx->needs_input_grad(1);
    const bool wants_bias = has_bias && ctx->needs_input_grad(2);
    at::Tensor grad_input, grad_weight, grad_bias;
    if (grad_output.defined() && (wants_input || wants_bias)) {
      const std::vector<int64_t> output_padding(stride.size(), 0), bias_sizes{weight.size(0)};
      std::tie(grad_input, std::ignore, grad_bias) = at::convolution_backward(
          grad_output, input, weight, has_bias ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, stride,
          padding, dilation, false, output_padding, groups, {wants_input, false, wants_bias});
    }
    if (grad_output.defined() && wants_weight) {
      if (holder->weight_grad != nullptr) grad_weight = run_native(*holder->weight_grad, input, grad_output, weight);
      if (grad_weight.defined()) {
        ++native_backwards;
      } else {
        ++fallback_backwards;
        grad_weight = fallback_weight_grad(holder->memo, input, grad_output, weight, stride, padding, dilation,
                                           groups);
      }
      grad_weight = in_layout_of(weight, grad_weight);
    }
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

std::shared_ptr<Memo>* memo_of(PyObject* capsule) {
  return static_cast<std::shared_ptr<Memo>*>(PyCapsule_GetPointer(capsule, "convwgrad.memo"));
}

// new_memo(key) -> a memo capsule for a patched layer's route, whose fallback is called with ``key``
PyObject* new_memo(PyObject*, PyObject* key) {
  auto memo = std::make_shared<Memo>();
  if (!int_value(key, memo->key)) return type_error("new_memo takes an int key");
  return memo_capsule(memo);
}

bool optional_tensor(PyObject* object, std::optional<at::Tensor>& out) {
  if (object == Py_None) return true;
  if (!THPVariable_CheckExact(object)) return false;
  out = THPVariable_Unpack(object);
  return true;
}

// conv(input, weight, bias, stride, padding, dilation, groups, memo) -> output: torch's convolution whose
// backward is the routed layer's native backward; None where a tensor is a subclass (not Parameter).
// The GIL is released around the convolution, as torch's own bindings do.
PyObject* conv(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 8) return type_error("conv takes 8 arguments");
  std::optional<at::Tensor> bias;
  if (!THPVariable_CheckExact(args[0]) || !THPVariable_CheckExact(args[1]) || !optional_tensor(args[2], bias)) {
    Py_RETURN_NONE;  // a tensor subclass: the Python function, whose calls it sees
  }
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 0;
  if (!int_vector(args[3], stride) || !int_vector(args[4], padding) || !int_vector(args[5], dilation) ||
      !int_value(args[6], groups)) {
    return type_error("conv's stride, padding, dilation and groups must be ints");
  }
  std::shared_ptr<Memo>* memo = memo_of(args[7]);
  if (memo == nullptr) return nullptr;
  auto holder = c10::make_intrusive<MemoHolder>();
  holder->memo = *memo;
  const auto& installed = (*memo)->weight_grad;
  if (installed != nullptr && check_context() == 1 && installed->context == state->context_changes) {
    holder->weight_grad = installed;
  }
  const at::Tensor& input = THPVariable_Unpack(args[0]);
  const at::Tensor& weight = THPVariable_Unpack(args[1]);
  at::Tensor output;
  {
    pybind11::gil_scoped_release no_gil;
    output = RoutedConv::apply(input, weight, bias, stride, padding, dilation, groups, holder);
  }
  return THPVariable_Wrap(std::move(output));
  END_HANDLE_TH_ERRORS
}

bool uint_value(PyObject* value, uint64_t& out) {
  if (!PyLong_Check(value)) return false;
  out = PyLong_AsUnsignedLongLongMask(value);  // a literal's bits: negative ints wrap as C does
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// One launch from (function, grid, block, shared_bytes, input_alignment, grad_output_alignment,
// params: ((source, nbytes, value), ...)).
bool parse_launch(PyObject* object, Launch& launch) {
  if (!PyTuple_Check(object) || PyTuple_GET_SIZE(object) != 7) return false;
  uint64_t function = 0, shared = 0;
  std::vector<int64_t> grid, block;
  if (!uint_value(PyTuple_GET_ITEM(object, 0), function) || function == 0 ||
      !int_vector(PyTuple_GET_ITEM(object, 1), grid) || grid.size() != 3 ||
      !int_vector(PyTuple_GET_ITEM(object, 2), block) || block.size() != 3 ||
      !uint_value(PyTuple_GET_ITEM(object, 3), shared) ||
      !uint_value(PyTuple_GET_ITEM(object, 4), launch.input_alignment) || launch.input_alignment == 0 ||
      !uint_value(PyTuple_GET_ITEM(object, 5), launch.grad_output_alignment) || launch.grad_output_alignment == 0) {
    return false;
  }
  launch.function = reinterpret_cast<void*>(function);
  launch.shared_bytes = static_cast<unsigned>(shared);
  for (int i = 0; i < 3; ++i) {
    if (grid[i] < 1 || block[i] < 1) return false;
    launch.grid[i] = static_cast<unsigned>(grid[i]);
    launch.block[i] = static_cast<unsigned>(block[i]);
  }
  PyObject* params = PySequence_Fast(PyTuple_GET_ITEM(object, 6), "");
  if (params == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(params); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(params, i);
    Param param;
    ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 3 && int_value(PyTuple_GET_ITEM(item, 0), param.source) &&
         int_value(PyTuple_GET_ITEM(item, 1), param.nbytes) && uint_value(PyTuple_GET_ITEM(item, 2), param.value) &&
         param.source >= kLiteral && param.source <= kOut && (param.nbytes == 4 || param.nbytes == 8) &&
         (param.source == kLiteral || param.nbytes == 8);
    if (ok && param.nbytes == 4) param.value &= 0xffffffffull;
    launch.params.push_back(param);
  }
  Py_DECREF(params);
  return ok;
}

// install(memo, input, grad_output, weight, stages, workspace_nbytes) -> bool: the launches of dW for these
// tensors' metadata, for the memo's next forwards. stages: ((launch, ...), ...), each launch as parse_launch
// reads it; dW is allocated in the weight's strides where they address what a contiguous dW does.
PyObject* install(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 6) return type_error("install takes 6 arguments");
  std::shared_ptr<Memo>* memo = memo_of(args[0]);
  if (memo == nullptr) return nullptr;
  for (int i = 1; i < 4; ++i) {
    if (!THPVariable_CheckExact(args[i])) return type_error("install takes plain tensors");
  }
  const at::Tensor& input = THPVariable_Unpack(args[1]);
  const at::Tensor& grad_output = THPVariable_Unpack(args[2]);
  const at::Tensor& weight = THPVariable_Unpack(args[3]);
  auto dw = std::make_shared<NativeWeightGrad>();
  if (!input.is_cuda() || !int_value(args[5], dw->workspace_nbytes) || dw->workspace_nbytes < 0) Py_RETURN_FALSE;
  PyObject* stages = PySequence_Fast(args[4], "stages must be a sequence");
  if (stages == nullptr) return nullptr;
  bool ok = PySequence_Fast_GET_SIZE(stages) > 0;
  for (Py_ssize_t s = 0; ok && s < PySequence_Fast_GET_SIZE(stages); ++s) {
    PyObject* launches = PySequence_Fast(PySequence_Fast_GET_ITEM(stages, s), "");
    if (launches == nullptr) {
      PyErr_Clear();
      ok = false;
      break;
    }
    std::vector<Launch> stage(static_cast<size_t>(PySequence_Fast_GET_SIZE(launches)));
    for (size_t i = 0; ok && i < stage.size(); ++i) {
      ok = parse_launch(PySequence_Fast_GET_ITEM(launches, static_cast<Py_ssize_t>(i)), stage[i]);
    }
    Py_DECREF(launches);
    ok = ok && !stage.empty();
    dw->stages.push_back(std::move(stage));
  }
  Py_DECREF(stages);
  if (!ok) return type_error("install: malformed stages");
  if (check_context() < 0) Py_RETURN_FALSE;
  dw->context = state->context_changes;
  dw->device_index = input.device().index();
  dw->dtype = input.scalar_type();
  dw->input_sizes = input.sizes().vec();
  dw->input_strides = input.strides().vec();
  dw->grad_output_sizes = grad_output.sizes().vec();
  dw->grad_output_strides = grad_output.strides().vec();
  dw->weight_sizes = weight.sizes().vec();
  dw->weight_strides = weight.strides().vec();
  // contiguous strides, or the weight's where they differ only on dims of size 1 (same addresses)
  std::vector<int64_t> contiguous(weight.dim(), 1);
  for (int64_t d = weight.dim() - 2; d >= 0; --d) contiguous[d] = contiguous[d + 1] * weight.size(d + 1);
  bool weight_strided = true;
  for (int64_t d = 0; d < weight.dim(); ++d) {
    if (weight.size(d) > 1 && weight.stride(d) != contiguous[d]) weight_strided = false;
  }
  dw->out_strides = weight_strided ? dw->weight_strides : contiguous;
  (*memo)->weight_grad = std::move(dw);
  Py_RETURN_TRUE;
  END_HANDLE_TH_ERRORS
}

// configure_backward(fallback, enabled_by_default, open_logs)
PyObject* configure_backward(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) return type_error("configure_backward takes 3 arguments");
  if (!PyCallable_Check(args[0])) return type_error("fallback must be callable");
  Py_INCREF(args[0]);
  PyObject* old = fallback;
  fallback = args[0];
  Py_XDECREF(old);
  enabled_by_default = PyObject_IsTrue(args[1]) == 1;
  open_logs = PyLong_AsLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}

// set_open_logs(n): record_launches logs open (the native backward leaves dW to Python while any is)
PyObject* set_open_logs(PyObject*, PyObject* count) {
  open_logs = PyLong_AsLongLong(count);
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}

// set_thread_enabled(bool): convwgrad.set_enabled on this thread
PyObject* set_thread_enabled(PyObject*, PyObject* value) {
  thread_enabled = PyObject_IsTrue(value) == 1 ? 1 : 0;
  Py_RETURN_NONE;
}

// set_poison(bool): NaN in dW and the workspace before each native launch (tests: every element written)
PyObject* set_poison(PyObject*, PyObject* value) {
  poison = PyObject_IsTrue(value) == 1;
  Py_RETURN_NONE;
}

// backward_stats() -> (native backwards, fallback backwards, driver found)
PyObject* backward_stats(PyObject*, PyObject*) {
  const DriverApi& api = driver_api();
  return Py_BuildValue("(KKO)", native_backwards.load(), fallback_backwards.load(),
                       api.launch != nullptr && api.is_capturing != nullptr ? Py_True : Py_False);
}

PyMethodDef methods[] = {
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(configure)), METH_FASTCALL,
     "Set where the planning context is read from; drops every kept call."},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call)), METH_FASTCALL,
     "dW from the kept call of this signature, or None."},
    {"keep", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(keep)), METH_FASTCALL,
     "Keep a prepared call for this signature."},
    {"call_problem", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_problem)), METH_FASTCALL,
     "dispatch_conv_grouped's dW from the kept call of (problem, plan, tensors), or None."},
    {"keep_problem", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(keep_problem)),
     METH_FASTCALL, "Keep a prepared call for (problem, plan, tensors)."},
    {"clear", clear, METH_NOARGS, "Drop every kept call."},
    {"stats", stats, METH_NOARGS, "(hits, misses, kept calls, context changes)."},
    {"conv", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(conv)), METH_FASTCALL,
     "torch's convolution with the routed layer's native backward."},
    {"new_memo", new_memo, METH_O, "A memo capsule for a patched layer's route."},
    {"install", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(install)), METH_FASTCALL,
     "Install dW's launches for these tensors' metadata in a memo."},
    {"configure_backward", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(configure_backward)),
     METH_FASTCALL, "Set the native backward's fallback, default switch and open logs."},
    {"set_open_logs", set_open_logs, METH_O, "record_launches logs open."},
    {"set_thread_enabled", set_thread_enabled, METH_O, "convwgrad.set_enabled on this thread."},
    {"set_poison", set_poison, METH_O, "NaN in dW and the workspace before each native launch (tests)."},
    {"backward_stats", backward_stats, METH_NOARGS, "(native backwards, fallback backwards, driver found)."},
    {nullptr, nullptr, 0, nullptr},
};

#define CONVWGRAD_STRINGIFY_(name) #name
#define CONVWGRAD_STRINGIFY(name) CONVWGRAD_STRINGIFY_(name)
#define CONVWGRAD_CONCAT_(a, b) a##b
#define CONVWGRAD_CONCAT(a, b) CONVWGRAD_CONCAT_(a, b)

PyModuleDef module = {PyModuleDef_HEAD_INIT, CONVWGRAD_STRINGIFY(TORCH_EXTENSION_NAME),
                      "convwgrad's native warm path (see convwgrad/provider/native)", -1, methods};

}  // namespace

PyMODINIT_FUNC CONVWGRAD_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
