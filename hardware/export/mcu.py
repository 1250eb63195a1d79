"""What an exported C policy costs on a flight controller's MCU: flash and RAM from Debian's
``gcc-arm-none-eabi`` (Cortex-M4F / M7, hard float), and instructions per control step counted on an
emulated Cortex-M (Debian's ``qemu-system-arm``).

    from hardware.export import export_c
    from hardware.export.mcu import MCUS, mcu_size, mcu_rollout
    sources = export_c(policy, "c/")
    mcu_size(sources, MCUS["stm32f405"])      # {"flash": ..., "ram": ..., "state": ...} bytes
    run = mcu_rollout(sources, MCUS["stm32f405"], observations)   # actions and instructions per step

Instruction counts come from qemu's ``-icount shift=0`` (virtual time advances 1 ns per executed
instruction, deterministically), read through the core's SysTick around each ``<prefix>_step`` and
calibrated in the same run on a loop of known length. They are instructions, not cycles: ``us_per_step``
divides them by the MCU's clock, i.e. assumes one instruction a cycle. A Cortex-M4 takes 1 cycle for most
integer and single-precision FPU instructions and 2 for loads, stores and ``vdiv`` (14); a Cortex-M7 can issue two
a cycle but waits on flash without its caches (TCM or cache hits assumed here). What qemu does not model:
flash wait states, caches, bus contention with DMA and the rest of the firmware.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .c_codegen import CSources, c_array

GCC = "arm-none-eabi-gcc"
QEMU = "qemu-system-arm"
PACKAGES = {GCC: "gcc-arm-none-eabi libnewlib-arm-none-eabi", QEMU: "qemu-system-arm"}


@dataclass(frozen=True)
class MCU:
    """A flight-controller microcontroller: its core's compiler flags, clock, memories and the qemu board
    with the same core (``mps2-an386``: Cortex-M4F, ``mps2-an500``: Cortex-M7)."""

    name: str
    core: str  # cortex-m4 | cortex-m7
    fpu: str  # -mfpu
    clock_hz: float
    flash_bytes: int
    ram_bytes: int  # RAM a policy may use (the main SRAM; not CCM/TCM)
    qemu_machine: str

    @property
    def cflags(self) -> list[str]:
        return [f"-mcpu={self.core}", "-mthumb", "-mfloat-abi=hard", f"-mfpu={self.fpu}"]


MCUS = {
    "stm32f405": MCU("STM32F405 (Cortex-M4F, 168 MHz)", "cortex-m4", "fpv4-sp-d16", 168e6, 1024 * 1024,
                     128 * 1024, "mps2-an386"),
    "stm32f722": MCU("STM32F722 (Cortex-M7, 216 MHz)", "cortex-m7", "fpv5-sp-d16", 216e6, 512 * 1024,
                     256 * 1024, "mps2-an500"),
    "stm32h743": MCU("STM32H743 (Cortex-M7, 480 MHz)", "cortex-m7", "fpv5-d16", 480e6, 2048 * 1024,
                     512 * 1024, "mps2-an500"),
}
OPT = "-O2"
CALIBRATION_LOOPS = 200_000  # iterations of a 2-instruction loop (subs, bne)

LINKER_SCRIPT = """ENTRY(reset_handler)
MEMORY { FLASH (rx) : ORIGIN = 0x00000000, LENGTH = 4M
         RAM (rwx) : ORIGIN = 0x20000000, LENGTH = 4M }
SECTIONS {
  .text : { KEEP(*(.vectors)) *(.text*) *(.rodata*) . = ALIGN(4); } > FLASH
  .ARM.exidx : { *(.ARM.exidx*) } > FLASH
  _data_load = LOADADDR(.data);
  .data : { _data_start = .; *(.data*) . = ALIGN(4); _data_end = .; } > RAM AT > FLASH
  .bss (NOLOAD) : { _bss_start = .; *(.bss*) *(COMMON) . = ALIGN(4); _bss_end = .; } > RAM
  _stack_top = ORIGIN(RAM) + LENGTH(RAM);
}
"""

# Bare-metal start-up and semihosting: FPU on, .data copied, .bss zeroed, main's status to qemu's exit code.
STARTUP = """#include <stdint.h>
extern uint32_t _data_load, _data_start, _data_end, _bss_start, _bss_end, _stack_top;
int main(void);
void reset_handler(void);
void fault_handler(void);

static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void semihost_write(const char *s) { (void)semihost(0x04, s); }

void semihost_exit(int status)
{
    static uint32_t block[2];
    block[0] = 0x20026u; /* ADP_Stopped_ApplicationExit */
    block[1] = (uint32_t)status;
    (void)semihost(0x20, block); /* SYS_EXIT_EXTENDED */
    (void)semihost(0x18, (const void *)(status == 0 ? 0x20026u : 0x20023u));
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) static const void *vectors[16] = {
    &_stack_top, (void *)reset_handler, (void *)fault_handler, (void *)fault_handler, (void *)fault_handler,
    (void *)fault_handler, (void *)fault_handler};

void fault_handler(void)
{
    semihost_write("fault\\n");
    semihost_exit(70);
}

void reset_handler(void)
{
    uint32_t *src = &_data_load, *dst;
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access (the FPU) */
    __asm__ volatile("dsb\\n isb");
    for (dst = &_data_start; dst < &_data_end;) *dst++ = *src++;
    for (dst = &_bss_start; dst < &_bss_end;) *dst++ = 0u;
    semihost_exit(main());
}
"""

# Steps the policy over embedded observations; prints the calibration, per-step SysTick ticks and the actions.
HARNESS = """#include <stdint.h>
#include <string.h>
#include "{prefix}.h"
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
void semihost_write(const char *s);
{observations}
static {prefix}_state state;
static char line[64];

static void put_hex(const char *tag, uint32_t v)
{{
    static const char digits[] = "0123456789abcdef";
    int i, n = 0;
    while (tag[n]) {{
        line[n] = tag[n];
        ++n;
    }}
    for (i = 7; i >= 0; --i) line[n++] = digits[(v >> (4 * i)) & 0xfu];
    line[n++] = '\\n';
    line[n] = 0;
    semihost_write(line);
}}

static uint32_t ticks_since(uint32_t start) {{ return (start - SYST_CVR) & 0xFFFFFFu; }}

int main(void)
{{
    float action[{up}_ACTION_DIM];
    uint32_t t0, dt, loops = {loops}u;
    long t;
    int j;
    SYST_RVR = 0xFFFFFFu;
    SYST_CVR = 0u;
    SYST_CSR = 5u; /* enabled, processor clock, no interrupt */
    t0 = SYST_CVR;
    __asm__ volatile("1: subs %0, %0, #1\\n bne 1b" : "+r"(loops));
    put_hex("cal ", ticks_since(t0));
    t0 = SYST_CVR;
    put_hex("nil ", ticks_since(t0));
    put_hex("bytes ", (uint32_t)sizeof(state));
    {prefix}_reset(&state);
    for (t = 0; t < STEPS; ++t) {{
        t0 = SYST_CVR;
        {prefix}_step(&state, observations[t], action);
        dt = ticks_since(t0);
        put_hex("step ", dt);
        for (j = 0; j < {up}_ACTION_DIM; ++j) {{
            union {{ float f; uint32_t u; }} bits;
            bits.f = action[j];
            put_hex("a ", bits.u);
        }}
    }}
    return 0;
}}
"""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on the PATH: install Debian's {PACKAGES[name]} "
                           f"(apt-get install {PACKAGES[name]})")
    return path


def _compile(sources: CSources, mcu: MCU, directory: Path, extra: list[Path], output: Path, link: bool) -> Path:
    sources.write(directory)
    cmd = [_tool(GCC), *mcu.cflags, "-std=c99", OPT, "-Wall", "-Wextra", "-Werror", "-ffunction-sections",
           "-fdata-sections", "-fstack-usage", *(["-c"] if not link else []), str(directory / f"{sources.prefix}.c"), *map(str, extra),
           "-o", str(output)]
    if link:
        (directory / "mcu.ld").write_text(LINKER_SCRIPT)
        cmd[cmd.index("-std=c99")] = "-std=gnu99"  # the harness's inline assembly
        cmd += ["-nostartfiles", f"-T{directory / 'mcu.ld'}", "-Wl,--gc-sections", "-lm", "-lc", "-lnosys"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{GCC} for {mcu.name} failed ({' '.join(cmd)}):\n{r.stderr}")
    return output


def _sections(path: Path) -> dict[str, int]:
    r = subprocess.run([_tool(GCC).replace("gcc", "size"), str(path)], capture_output=True, text=True, check=True)
    text, data, bss = (int(v) for v in r.stdout.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}


def mcu_size(sources: CSources, mcu: MCU) -> dict[str, int]:
    """Bytes the policy adds to a firmware for ``mcu`` (``arm-none-eabi-gcc -O2``, hard float): ``flash`` (code and
    ``static const`` weights, plus initialized data), ``ram`` (its own data and bss, one ``<prefix>_state``, which
    the caller owns, and the stack), ``state`` (that struct alone) and ``stack`` (the frames of all its functions
    added up, from ``-fstack-usage``: a bound on the deepest call chain)."""
    with tempfile.TemporaryDirectory(prefix="robo-mcu-") as tmp:
        tmp = Path(tmp)
        obj = _compile(sources, mcu, tmp, [], tmp / "policy.o", link=False)
        s = _sections(obj)
        stack = sum(int(line.split("\t")[1]) for line in (tmp / "policy.su").read_text().splitlines() if line)
        probe = tmp / "probe.c"
        probe.write_text(f'#include "{sources.prefix}.h"\n{sources.prefix}_state robo_probe_state;\n')
        probe_obj = tmp / "probe.o"
        subprocess.run([_tool(GCC), *mcu.cflags, "-std=c99", "-fno-common", "-c", str(probe), "-I", str(tmp), "-o",
                        str(probe_obj)], check=True, capture_output=True)
        state = _sections(probe_obj)["bss"]
    return {"flash": s["text"] + s["data"], "ram": s["data"] + s["bss"] + state + stack, "state": state,
            "stack": stack}


@dataclass
class MCURollout:
    """One run on the emulated core: actions (T, A) and instructions per ``<prefix>_step`` (T,)."""

    mcu: MCU
    actions: np.ndarray
    instructions: np.ndarray
    state_bytes: int

    @property
    def us_per_step(self) -> np.ndarray:
        """(T,) µs a step at the MCU's clock, one instruction a cycle (see the module docstring)."""
        return self.instructions / self.mcu.clock_hz * 1e6

    def fits(self, rate_hz: float, spread: bool = False) -> bool:
        """Every step inside a ``rate_hz`` loop (``spread``: the mean step, as if each chunk's planning were
        spread over the steps it covers)."""
        us = self.us_per_step
        return float(us.mean() if spread else us.max()) <= 1e6 / rate_hz


def mcu_rollout(sources: CSources, mcu: MCU, observations: np.ndarray, timeout_s: float = 600.0) -> MCURollout:
    """Build ``sources`` for ``mcu``, step it from a reset state over ``observations`` (T, obs_dim) on qemu's
    emulated core, and return its actions and instruction counts (see the module docstring)."""
    obs = np.ascontiguousarray(observations, dtype=np.float32)
    if obs.ndim != 2:
        raise ValueError(f"observations have shape {obs.shape}, expected (T, obs_dim)")
    with tempfile.TemporaryDirectory(prefix="robo-mcu-") as tmp:
        tmp = Path(tmp)
        table = c_array("observations_flat", obs).replace("static const float observations_flat",
                                                          "static const float observations_flat")
        table += (f"#define STEPS {len(obs)}L\n"
                  f"static const float (*const observations)[{obs.shape[1]}] = "
                  f"(const float (*)[{obs.shape[1]}])observations_flat;\n")
        (tmp / "harness.c").write_text(HARNESS.format(prefix=sources.prefix, up=sources.prefix.upper(),
                                                      observations=table, loops=CALIBRATION_LOOPS))
        (tmp / "startup.c").write_text(STARTUP)
        elf = _compile(sources, mcu, tmp, [tmp / "harness.c", tmp / "startup.c"], tmp / "policy.elf", link=True)
        cmd = [_tool(QEMU), "-machine", mcu.qemu_machine, "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native", "-icount", "shift=0,align=off,sleep=off",
               "-kernel", str(elf)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise RuntimeError(f"{mcu.qemu_machine} run of {sources.prefix} exited with {r.returncode}: "
                           f"{(r.stdout + r.stderr).strip()[-300:]}")
    values: dict[str, list[int]] = {"cal": [], "nil": [], "bytes": [], "step": [], "a": []}
    for line in (r.stdout + r.stderr).splitlines():
        tag, _, v = line.partition(" ")
        if tag in values:
            values[tag].append(int(v, 16))
    if len(values["step"]) != len(obs):
        raise RuntimeError(f"{mcu.qemu_machine} printed {len(values['step'])} of {len(obs)} steps: {r.stdout[-300:]}")
    per_tick = 2 * CALIBRATION_LOOPS / (values["cal"][0] - values["nil"][0])
    ticks = np.asarray(values["step"], dtype=np.float64) - values["nil"][0]
    actions = np.asarray(values["a"], dtype=np.uint32).view(np.float32).reshape(len(obs), -1)
    return MCURollout(mcu, actions, ticks * per_tick, values["bytes"][0])
