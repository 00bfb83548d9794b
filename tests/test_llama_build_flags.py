"""The Makefile's choice of llama.cpp build flags from /proc/cpuinfo's flags (``make -n``: nothing is built).

AMX must stay off on every CPU (llama.cpp's AMX build crashed at the first token on our Xeon VM); AVX-512
only where the CPU lists every AVX-512 subset ggml's GGML_AVX512 compiles for; AVX2 otherwise."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AVX2 = "fpu sse4_2 avx avx2 fma f16c bmi2"
AVX512 = AVX2 + " avx512f avx512cd avx512vl avx512dq avx512bw"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def cmake_args(cpu_flags: str, **extra: str) -> dict[str, str]:
    overrides = [f"LLAMA_CPU_FLAGS={cpu_flags}"] + [f"{k}={v}" for k, v in extra.items()]
    done = subprocess.run(["make", "-n", "-C", str(ROOT), "--no-print-directory", "install-fast", "VENV=/nonexistent-venv",
                           *overrides], capture_output=True, text=True, check=True)
    line = next(l for l in done.stdout.splitlines() if l.startswith('echo "CMAKE_ARGS='))
    return dict(re.findall(r"-D(\w+)=(\w+)", line))


def test_amx_cpu_gets_avx512_without_amx():
    args = cmake_args(AVX512 + " avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16")
    assert args["GGML_NATIVE"] == "OFF" and args["GGML_AVX512"] == "ON"
    assert args["GGML_AVX512_VNNI"] == "ON" and args["GGML_AVX512_BF16"] == "ON" and args["GGML_AVX512_VBMI"] == "OFF"
    assert args["GGML_AMX_TILE"] == args["GGML_AMX_INT8"] == args["GGML_AMX_BF16"] == "OFF"


def test_zen4_gets_every_avx512_extension():
    args = cmake_args(AVX512 + " avx512ifma avx512vbmi avx512_vnni avx512_bf16 avx512_vbmi2")
    assert {k: args[k] for k in ("GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_VBMI", "GGML_AVX512_BF16")} == \
        dict.fromkeys(("GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_VBMI", "GGML_AVX512_BF16"), "ON")
    assert args["GGML_AMX_INT8"] == "OFF"


@pytest.mark.parametrize("flags", [AVX2, AVX2 + " avx512f", ""])
def test_avx2_otherwise(flags):
    args = cmake_args(flags)
    assert args["GGML_AVX2"] == "ON" and args["GGML_AVX512"] == "OFF" and args["GGML_AMX_INT8"] == "OFF"
    assert "GGML_AVX512_VNNI" not in args


def test_explicit_flags_win():
    assert cmake_args(AVX512, LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON") == {"GGML_NATIVE": "ON"}
