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
#include <c10/core/GradMode.h>  // AutoGradMode: torch 2.11's ATen.h does not bring it in
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdlib>
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
