// Programmatic dependent launch (sm_90): a kernel launched with programmatic stream serialization (labkit.pdl)
// may start while the kernel before it still runs. The earlier kernel says when that may begin; the later
// one waits, before reading anything the earlier one writes, until it has completed and its memory is visible.
// Launched the ordinary way, both are no-ops.
#pragma once

static __device__ __forceinline__ void grid_dependents_may_launch() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

static __device__ __forceinline__ void grid_dependency_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}
