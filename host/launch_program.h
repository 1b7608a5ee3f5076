// A labkit.core.program Program run from C++: the same memsets and launches the Python runner (BoundProgram)
// makes through CuPy, with no Python between them. Steps come from labkit.core.program.native_steps: function
// handles already loaded by labkit.core.launch (module, shared-memory opt-in), arguments as slot addresses,
// tensor maps, constants or the call's eps.
//
// The CUDA driver is reached through dlopen, so this builds with nothing but a C++ compiler (no CUDA toolkit),
// and a machine without a driver builds it too (it then reports the driver missing when asked to launch).
#pragma once

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace labkit_host {

using CUresult = int;
using CUfunction = void*;
using CUstream = void*;
using CUcontext = void*;
using CUdevice = int;

// The driver entry points a program needs, resolved once.
struct Driver {
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void**, void**) = nullptr;
  CUresult (*memset_d8_async)(unsigned long long, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*encode_tiled)(void*, int, unsigned, void*, const unsigned long long*, const unsigned long long*,
                           const unsigned*, const unsigned*, int, int, int, int) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  std::string error;

  static const Driver& get() {
    static Driver d = load();
    return d;
  }

 private:
  template <typename F>
  static void resolve(void* lib, const char* name, F& f, std::string& error) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (f == nullptr && error.empty()) error = std::string("libcuda.so.1 has no ") + name;
  }

  static Driver load() {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      d.error = "no CUDA driver (libcuda.so.1)";
      return d;
    }
    resolve(lib, "cuLaunchKernel", d.launch, d.error);
    resolve(lib, "cuMemsetD8Async", d.memset_d8_async, d.error);
    resolve(lib, "cuTensorMapEncodeTiled", d.encode_tiled, d.error);
    resolve(lib, "cuCtxGetCurrent", d.ctx_get_current, d.error);
    resolve(lib, "cuCtxSetCurrent", d.ctx_set_current, d.error);
    resolve(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain, d.error);
    resolve(lib, "cuDeviceGet", d.device_get, d.error);
    return d;
  }
};

inline void check(CUresult r, const char* what) {
  if (r != 0) throw std::runtime_error(std::string(what) + " failed with CUresult " + std::to_string(r));
}

// The thread's current context made the device's primary one, which CuPy loaded the modules into and torch's
// runtime calls use. An autograd engine thread may never have made a runtime call that sets it.
inline void use_primary_context(int device) {
  constexpr int kMaxDevices = 64;
  // atomics: threads read a device's entry while the first of them may be writing it (acquire pairs with release)
  static std::atomic<CUcontext> primary[kMaxDevices] = {};
  static std::mutex mu;
  const Driver& d = Driver::get();
  if (!d.error.empty()) throw std::runtime_error(d.error);
  if (device < 0 || device >= kMaxDevices) throw std::runtime_error("device index out of range");
  CUcontext current = nullptr;
  check(d.ctx_get_current(&current), "cuCtxGetCurrent");
  CUcontext want = primary[device].load(std::memory_order_acquire);
  if (want == nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    want = primary[device].load(std::memory_order_relaxed);
    if (want == nullptr) {
      CUdevice dev = 0;
      check(d.device_get(&dev, device), "cuDeviceGet");
      check(d.primary_ctx_retain(&want, dev), "cuDevicePrimaryCtxRetain");
      primary[device].store(want, std::memory_order_release);
    }
  }
  if (current != want) check(d.ctx_set_current(want), "cuCtxSetCurrent");
}

enum ArgKind : int { kPtr = 0, kMap = 1, kI32 = 2, kU64 = 3, kEps = 4 };

// One tiled tensor map geometry (float32, or 2-byte elements moved as UINT16 bits), with the maps it encoded per address (a model's activations come back
// to the same few addresses from torch's caching allocator).
struct MapGeometry {
  unsigned rank = 0;
  unsigned long long dims[5] = {}, strides[4] = {};
  unsigned box[5] = {}, elem[5] = {1, 1, 1, 1, 1};
  int data_type = 7;  // CU_TENSOR_MAP_DATA_TYPE_FLOAT32; 1 (UINT16) for bfloat16/float16
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::array<uint64_t, 16>>> cache;
  static constexpr size_t kMaxCached = 64;

  void encode(uint64_t address, void* out) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& hit : cache) {
      if (hit.first == address) {
        std::memcpy(out, hit.second.data(), 128);
        return;
      }
    }
    if (address % 16) throw std::runtime_error("tensor maps need a 16-byte aligned address");
    alignas(64) std::array<uint64_t, 16> map{};
    // the elements' type, no interleave, no swizzle, L2 promotion 256B (3), zero fill out of bounds: as
    // labkit.core.tensormap encodes them
    check(Driver::get().encode_tiled(map.data(), data_type, rank, reinterpret_cast<void*>(address), dims, strides, box,
                                     elem, 0, 0, 3, 0),
          "cuTensorMapEncodeTiled");
    if (cache.size() >= kMaxCached) cache.clear();
    cache.emplace_back(address, map);
    std::memcpy(out, map.data(), 128);
  }
};

struct Arg {
  int kind = kPtr;
  int slot = 0;
  int64_t value = 0;  // pointer offset, constant, or index into Program::maps
};

struct Step {
  bool memset = false;
  CUfunction fn = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  std::vector<Arg> args;
  int slot = 0;  // memset: where, and how many bytes
  int64_t offset = 0, nbytes = 0;
};

struct Program {
  int slots = 0;
  std::vector<Step> steps;
  std::vector<std::unique_ptr<MapGeometry>> maps;

  static constexpr int kMaxArgs = 24;

  // The first step that reads or writes any of `wanted` (steps.size() where none does). The host launches the
  // steps before it first and allocates those slots' buffers after, so the GPU starts while the host allocates.
  size_t first_use(const std::vector<int>& wanted) const {
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      for (int slot : wanted) {
        if (s.memset && s.slot == slot) return i;
        for (const Arg& a : s.args)
          if ((a.kind == kPtr || a.kind == kMap) && a.slot == slot) return i;
      }
    }
    return steps.size();
  }

  // Launch every step on `stream` of the current device; `ptrs` holds one address per slot.
  void run(const uint64_t* ptrs, float eps, CUstream stream) const { run(ptrs, eps, stream, 0, steps.size()); }

  // Launch steps [begin, end); `ptrs` needs only the slots those steps use.
  void run(const uint64_t* ptrs, float eps, CUstream stream, size_t begin, size_t end) const {
    const Driver& d = Driver::get();
    if (!d.error.empty()) throw std::runtime_error(d.error);
    for (size_t k = begin; k < end && k < steps.size(); ++k) {
      const Step& s = steps[k];
      if (s.memset) {
        check(d.memset_d8_async(ptrs[s.slot] + s.offset, 0, static_cast<size_t>(s.nbytes), stream),
              "cuMemsetD8Async");
        continue;
      }
      alignas(64) unsigned char storage[kMaxArgs][128];
      void* params[kMaxArgs];
      for (size_t i = 0; i < s.args.size(); ++i) {
        const Arg& a = s.args[i];
        params[i] = storage[i];
        switch (a.kind) {
          case kPtr: {
            uint64_t v = ptrs[a.slot] + static_cast<uint64_t>(a.value);
            std::memcpy(storage[i], &v, 8);
            break;
          }
          case kMap:
            maps[a.value]->encode(ptrs[a.slot], storage[i]);
            break;
          case kI32: {
            int32_t v = static_cast<int32_t>(a.value);
            std::memcpy(storage[i], &v, 4);
            break;
          }
          case kU64: {
            uint64_t v = static_cast<uint64_t>(a.value);
            std::memcpy(storage[i], &v, 8);
            break;
          }
          default:
            std::memcpy(storage[i], &eps, 4);
        }
      }
      check(d.launch(s.fn, s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2], s.shared_mem,
                     stream, params, nullptr),
            "cuLaunchKernel");
    }
  }
};

}  // namespace labkit_host
