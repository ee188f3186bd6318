"""Search: pick one program out of a SearchSpace by timing candidates (DESIGN.md "Search")."""

from lumos.search.genetic import GeneticSearch
from lumos.search.genome import Genome, Genomes, SearchError, extract, genome_key
from lumos.search.local import KernelSearch
from lumos.search.options import CompileOptions
from lumos.search.outcome import Invalid, KernelTime, Measured, Outcome, Rejected, Trial

__all__ = [
    "CompileOptions", "GeneticSearch", "Genome", "Genomes", "Invalid", "KernelSearch",
    "KernelTime", "Measured", "Outcome", "Rejected", "SearchError", "Trial", "extract",
    "genome_key",
]
