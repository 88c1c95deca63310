"""trnsim's NKI: the legacy `neuronxcc.nki` API (this module) traced into trnsim programs.

`from trnsim import nki` gives what `from neuronxcc import nki` gives: `nki.jit`, `nki.language`,
`nki.isa`, `nki.typing`, `nki.compiler`, and the drivers `simulate_kernel`, `baremetal`,
`benchmark`, `profile`. `trnsim.nki.compat.install()` makes `import neuronxcc.nki` resolve here.
The current `nki` API (0.3 - 0.6) is `trnsim.nki.current`; names of one API used through the other
raise `trnsim.nki.api_boundary.ApiMismatchError`.
"""

from trnsim.nki import compiler, isa, language, typing
from trnsim.nki.api_boundary import module_getattr
from trnsim.nki.jit import Kernel, baremetal, benchmark, jit, profile, simulate_kernel, trace
from trnsim.nki.tile import Tile as tensor

__getattr__ = module_getattr("nki", "current", __name__)

__all__ = ["Kernel", "baremetal", "benchmark", "compiler", "isa", "jit", "language", "profile",
           "simulate_kernel", "tensor", "trace", "typing"]
