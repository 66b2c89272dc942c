#!/bin/bash
# Builds DeepGEMM's extension in place in a source snapshot, for `python -m mxlogits bench --peer
# deepgemm` on a GPU machine (docs/performance.md). The snapshot is DeepGEMM's tree with its two
# submodules at their pinned commits under third-party/ (cutlass's include/, fmt's include/). It
# is never part of this repository. Afterwards: export PYTHONPATH=SNAPSHOT:$PYTHONPATH.
#   usage: tools/build_deepgemm.sh SNAPSHOT
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: tools/build_deepgemm.sh SNAPSHOT (the DeepGEMM tree with third-party/cutlass and fmt)" >&2; exit 2; }
src=$(realpath "$1")
for d in csrc/python_api.cpp third-party/cutlass/include/cute third-party/fmt/include; do
  [[ -e "$src/$d" ]] || { echo "build_deepgemm: $src/$d: not found; is $src the DeepGEMM tree with its submodules?" >&2; exit 2; }
done
# DeepGEMM compiles its kernels at run time against these headers, from the package's include/
ln -sfn "$src/third-party/cutlass/include/cutlass" "$src/deep_gemm/include/cutlass"
ln -sfn "$src/third-party/cutlass/include/cute" "$src/deep_gemm/include/cute"
cd "$src"
# setup.py's own build also wants `wheel` and git; the extension alone needs torch's builder
python3 - <<'PY'
import os
import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

abi = int(torch.compiled_with_cxx11_abi())
here = os.getcwd()  # ninja compiles from its build folder: the include paths must be absolute
setup(
    name="deep_gemm",
    ext_modules=[CUDAExtension(
        name="deep_gemm._C",
        sources=["csrc/python_api.cpp"],
        include_dirs=[f"{CUDA_HOME}/include", f"{CUDA_HOME}/include/cccl"]
        + [f"{here}/{d}" for d in ("deep_gemm/include", "third-party/cutlass/include", "third-party/fmt/include")],
        libraries=["cudart", "nvrtc"],
        library_dirs=[f"{CUDA_HOME}/lib64"],
        extra_compile_args=["-std=c++17", "-O3", "-fPIC", "-Wno-psabi", "-Wno-deprecated-declarations",
                            f"-D_GLIBCXX_USE_CXX11_ABI={abi}"],
    )],
    cmdclass={"build_ext": BuildExtension},
    script_args=["build_ext", "--inplace"],
)
PY
python3 -c "import deep_gemm; print('built', deep_gemm.__file__, deep_gemm.__version__)"
