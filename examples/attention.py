"""A graph for `lumos viz examples/attention.py -o attention.html`: the attention block of
`make demo` (lumos.demo), with a symbolic sequence length searched at s = 128 (`lumos viz`
reads `graph` and, if given, `options`)."""

import lumos
from lumos.demo import build

graph = build()[0]
options = lumos.CompileOptions(limit=4, dim_buckets={"s": [(1, 512, 128)]})
