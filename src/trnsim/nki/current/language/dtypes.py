"""nki 0.3+ dtypes: names (strings), as the current API exposes them (`t.dtype == nl.float32`).

Every name resolves through `trnsim.numerics.dtype`, including the MX types: float8_e8m0fnu
scales and the x4-packed float8_e4m3fn_x4 / float8_e5m2_x4 / float4_e2m1fn_x4 data (NeuronCore-v4).
"""

from __future__ import annotations

bool_ = "bool_"
int8, int16, int32 = "int8", "int16", "int32"
uint8, uint16, uint32 = "uint8", "uint16", "uint32"
float16, float32, bfloat16, tfloat32 = "float16", "float32", "bfloat16", "tfloat32"
float8_e4m3, float8_e4m3fn, float8_e5m2 = "float8_e4m3", "float8_e4m3fn", "float8_e5m2"
float8_e8m0fnu = "float8_e8m0fnu"
float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4 = ("float8_e4m3fn_x4", "float8_e5m2_x4",
                                                      "float4_e2m1fn_x4")

DTYPE_NAMES = (bool_, int8, int16, int32, uint8, uint16, uint32, float16, float32, bfloat16, tfloat32,
               float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float8_e4m3fn_x4,
               float8_e5m2_x4, float4_e2m1fn_x4)
