#!/usr/bin/env bash
# Fetch, on a machine that reaches PyPI, the notebook stack the GPU image lacks (papermill, nbconvert, nbformat,
# nbclient, ipykernel, latex2mathml, Liger-Kernel 0.8.5 for notebook 08's peers, HF transformers for notebook 10's
# GPT-2) as Python 3.12 manylinux wheels into .whl/ (git-ignored), for scripts/gpu_env.sh to install there. Packages
# the GPU image has already (its pip list in the device tool's KINDS.md; torch's own dependencies) are dropped, so
# that the image's own versions serve: two copies of one package side by side on the import path shadow each other.
# Run from the repository root; then carry .whl with the device call (about 28 MB: the device call carries 64 MiB with
# the tracked tree, so two optional runtime pieces nothing here imports are dropped below).
set -euo pipefail
dest=.whl
mkdir -p "$dest"
platforms=(manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any)
args=(--only-binary=:all: --python-version 3.12 --implementation cp -d "$dest")
for p in "${platforms[@]}"; do args+=(--platform "$p"); done
python3 -m pip download -q "${args[@]}" papermill nbconvert nbformat nbclient ipykernel latex2mathml
# Liger-Kernel pins torch: without --no-deps pip would fetch a CUDA torch build the image already has
python3 -m pip download -q --no-deps "${args[@]}" liger-kernel==0.8.5
# HF transformers for notebook 10's GPT-2 (labkit.studies.training_reach.gpt2_steps); its torch is the image's
python3 -m pip download -q "${args[@]}" "transformers<5"
# on the image already
for name in attrs certifi charset_normalizer click filelock fsspec idna jinja2 markupsafe numpy packaging psutil \
            pygments python_dateutil pyyaml requests tqdm typing_extensions urllib3 tzdata; do
    rm -f "$dest/${name}"-*.whl
done
# imported only when used: hf_xet by huggingface_hub's downloads (the GPU has no network), debugpy by ipykernel's
# debugger (guarded import), jedi and parso by IPython's completion (imported lazily, never in a batch run); 14 MB
rm -f "$dest"/hf_xet-*.whl "$dest"/debugpy-*.whl "$dest"/jedi-*.whl "$dest"/parso-*.whl
ls "$dest" | wc -l | xargs echo "wheels in $dest:"
