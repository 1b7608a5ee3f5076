# Sourced by the GPU passes (scripts/h200_pass.sh, scripts/arch_override_pass.sh) from the repository root: the
# notebook stack from wheels carried in .whl/ (the GPU image has no papermill/nbconvert/ipykernel; scripts/gpu_wheels.sh
# fetches them; CONTRIBUTING.md "GPU runs"),
# installed outside the image's site-packages, and the repository on the import path.
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
