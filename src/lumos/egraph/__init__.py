"""The e-graph layer: HLIR graph -> egglog terms -> saturated e-graph -> SearchSpace,
and a chosen program back to a Graph (DESIGN.md "E-graph")."""

from lumos.egraph.buckets import DimBucket
from lumos.egraph.build import build_spaces
from lumos.egraph.decode import decode
from lumos.egraph.readback import restrict
from lumos.egraph.schedule import CORE, Budget, Rules, Stage
from lumos.egraph.space import ENode, SearchSpace

__all__ = ["CORE", "Budget", "DimBucket", "ENode", "Rules", "SearchSpace", "Stage",
           "build_spaces", "decode", "restrict"]
