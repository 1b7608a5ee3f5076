"""What the compiler made of our kernels, and of torch's: resource usage, SASS, and the FMA contractions.

Path: a cubin (ours from labkit.core.compile, or one extracted from torch's libtorch_cuda.so) -> resource usage
and ptxas's report (registers, shared memory, spills) -> disassembly (cuobjdump -sass, or nvdisasm) -> parsed
instructions -> the contract report, which evaluates the instructions symbolically and matches them against the
arithmetic of torch's vectorized LayerNorm (push, merge, finish, output), so two binaries can be compared op for
op without comparing register names or instruction schedules.

Modules (import them directly; this package re-exports nothing):
    tools     finding cuobjdump / nvdisasm (ToolMissing when absent), their versions, running them, `disassemble`
    elf       a cubin's ELF sections: `text_sections` (machine code per function), `resource_usage`
    ptxas     ptxas's -v report: `parse_ptxas_log`, `ptxas_info` (recompile a kernel with --ptxas-options=-v)
    parser    SASS text -> `Instr` lists: `parse_sass`, `fp_op_sequence`, `opcode_histogram`, `branch_target`,
              `compact` / `parse_compact` (a whole function as committable lines and back)
    halves    the 16-bit halves of registers in torch's bfloat16/float16 kernels: which instructions move them,
              widen an element to float exactly, or round floats to T (`route`, `widen`, `narrow`)
    symbolic  symbolic evaluation of straight-line SASS into `Node` expressions (`Evaluator`, `render`), with the
              IEEE reciprocal / division idioms recognised, and 2-byte elements as halves reads them
    patterns  `contract_report` / `match`: torch's LayerNorm FMA contractions matched on the symbolic evaluation
    summary   committable summaries of our kernels and of torch's wheel, `compare`, `verdict`,
              `build_comparison`, `committed_comparisons` (data/sass/), `retype` (a float32 kernel's T instance)
              and `main`, the CLI behind `python -m labkit.sass`
    low_precision  the bfloat16/float16 forward's claims (`forward_claims`: widened loads, the float32 kernel's
              Welford, one rounding at the store), on the symbolic evaluation

Dependencies run one way: tools, elf, ptxas, parser, halves are leaves (elf uses tools, ptxas uses elf); symbolic
uses parser and halves; patterns uses symbolic; summary and low_precision use them. Only labkit.core is imported from
outside.
"""
