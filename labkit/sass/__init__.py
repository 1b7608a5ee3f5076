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
    parser    SASS text -> `Instr` lists: `parse_sass`, `fp_op_sequence`, `opcode_histogram`, `branch_target`
    symbolic  symbolic evaluation of straight-line SASS into `Node` expressions (`Evaluator`, `render`), with the
              IEEE reciprocal / division idioms recognised
    patterns  `contract_report`: torch's LayerNorm FMA contractions matched on the symbolic evaluation
    summary   committable summaries of our kernels and of torch's wheel, `compare`, `verdict`,
              `build_comparison`, `committed_comparisons` (data/sass/) and `main`, the CLI behind
              `python -m labkit.sass`

Dependencies run one way: tools, elf, ptxas, parser are leaves (elf uses tools, ptxas uses elf); symbolic uses
parser; patterns uses symbolic; summary uses all of them. Only labkit.core is imported from outside.
"""
