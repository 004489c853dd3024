"""struct dfl_fpga_fme_port_pr and DFL_FPGA_FME_PORT_PR against the C compiler and the kernel header."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.programming.dfl import DFL_FPGA_FME_PORT_PR, DflFpgaFmePortPr, io_request, pack_port_pr

FIELDS = ("argsz", "flags", "port_id", "buffer_size", "buffer_address")
SAMPLE = {"port_id": 3, "buffer_address": 0x1122334455667788, "buffer_size": 0x0A0B0C0D}

# The test's own copy of the UAPI definition; the kernel header is compared too when installed.
C_PROGRAM = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#if defined(__has_include)
#if __has_include(<linux/fpga-dfl.h>)
#include <linux/fpga-dfl.h>
#define HAVE_KERNEL_HEADER 1
#endif
#endif

struct own_port_pr {
    uint32_t argsz;
    uint32_t flags;
    uint32_t port_id;
    uint32_t buffer_size;
    uint64_t buffer_address;
};
#define OWN_MAGIC 0xB6
#define OWN_FME_BASE 0x80
#define OWN_PORT_PR _IO(OWN_MAGIC, OWN_FME_BASE + 0)

#define LAYOUT(prefix, type)                                                 \
    printf(prefix " sizeof %zu\n", sizeof(type));                           \
    printf(prefix " argsz %zu\n", offsetof(type, argsz));                   \
    printf(prefix " flags %zu\n", offsetof(type, flags));                   \
    printf(prefix " port_id %zu\n", offsetof(type, port_id));               \
    printf(prefix " buffer_size %zu\n", offsetof(type, buffer_size));       \
    printf(prefix " buffer_address %zu\n", offsetof(type, buffer_address))

int main(void) {
    struct own_port_pr sample = {sizeof(struct own_port_pr), 0, 3, 0x0A0B0C0Du, 0x1122334455667788ull};
    const unsigned char *bytes = (const unsigned char *)&sample;
    LAYOUT("own", struct own_port_pr);
    printf("own request %lu\n", (unsigned long)OWN_PORT_PR);
    printf("own bytes ");
    for (size_t i = 0; i < sizeof sample; i++) printf("%02x", bytes[i]);
    printf("\n");
#ifdef HAVE_KERNEL_HEADER
    LAYOUT("kernel", struct dfl_fpga_fme_port_pr);
    printf("kernel request %lu\n", (unsigned long)DFL_FPGA_FME_PORT_PR);
#endif
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """What the C compiler says, by source ('own' definition, 'kernel' header)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.fail("no C compiler: run scripts/setup (it installs gcc and the kernel headers)", pytrace=False)
    work: Path = tmp_path_factory.mktemp("dfl-uapi")
    source, binary = work / "layout.c", work / "layout"
    source.write_text(C_PROGRAM)
    subprocess.run([gcc, "-std=c11", "-Wall", "-Werror", "-o", str(binary), str(source)], check=True, timeout=60)
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=10).stdout
    facts: dict[str, dict[str, str]] = {}
    for line in output.splitlines():
        origin, key, value = line.split()
        facts.setdefault(origin, {})[key] = value
    return facts


def python_layout() -> dict[str, str]:
    layout = {"sizeof": str(ctypes.sizeof(DflFpgaFmePortPr))}
    layout.update({name: str(getattr(DflFpgaFmePortPr, name).offset) for name in FIELDS})
    return layout


@pytest.mark.parametrize(
    "origin", [pytest.param("own", id="own-definition"), pytest.param("kernel", id="kernel-header")]
)
def test_layout_matches_c(c_facts: dict[str, dict[str, str]], origin: str) -> None:
    if origin not in c_facts:
        pytest.fail("linux/fpga-dfl.h is not installed: run scripts/setup (Debian's linux-libc-dev)", pytrace=False)
    expected = {key: value for key, value in c_facts[origin].items() if key not in ("request", "bytes")}
    assert python_layout() == expected


@pytest.mark.parametrize(
    "origin", [pytest.param("own", id="own-definition"), pytest.param("kernel", id="kernel-header")]
)
def test_request_number_matches_c(c_facts: dict[str, dict[str, str]], origin: str) -> None:
    if origin not in c_facts:
        pytest.fail("linux/fpga-dfl.h is not installed: run scripts/setup (Debian's linux-libc-dev)", pytrace=False)
    assert int(c_facts[origin]["request"]) == DFL_FPGA_FME_PORT_PR


def test_packed_bytes_match_c(c_facts: dict[str, dict[str, str]]) -> None:
    packed = pack_port_pr(**SAMPLE)
    assert isinstance(packed, bytearray)
    assert packed.hex() == c_facts["own"]["bytes"]


def test_documented_values() -> None:
    """fpga-dfl.h: magic 0xB6, FME base 0x80, _IO with no direction or size; 4 x u32 + u64."""
    assert python_layout() == {
        "sizeof": "24",
        "argsz": "0",
        "flags": "4",
        "port_id": "8",
        "buffer_size": "12",
        "buffer_address": "16",
    }
    packed = DflFpgaFmePortPr.from_buffer_copy(bytes(pack_port_pr(**SAMPLE)))
    assert (packed.argsz, packed.flags, packed.port_id, packed.buffer_size, packed.buffer_address) == (
        24,
        0,
        3,
        0x0A0B0C0D,
        0x1122334455667788,
    )


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        pytest.param("x86_64", 0xB680, id="x86_64"),
        pytest.param("aarch64", 0xB680, id="arm64"),
        pytest.param("riscv64", 0xB680, id="riscv64"),
        pytest.param("ppc64le", 0x2000B680, id="powerpc"),
        pytest.param("mips64", 0x2000B680, id="mips"),
        pytest.param("sparc64", 0x2000B680, id="sparc"),
    ],
)
def test_io_encoding_per_architecture(machine: str, expected: int) -> None:
    assert io_request(0xB6, 0x80, machine) == expected
