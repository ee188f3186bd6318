"""Search: pick one program out of a SearchSpace by timing candidates (DESIGN.md "Search")."""

from lumos.search.genetic import GeneticSearch, Invalid, Measured, Outcome, Rejected, Trial
from lumos.search.genome import Genome, Genomes, SearchError, extract, genome_key
from lumos.search.options import CompileOptions

__all__ = [
    "CompileOptions", "GeneticSearch", "Genome", "Genomes", "Invalid", "Measured", "Outcome",
    "Rejected", "SearchError", "Trial", "extract", "genome_key",
]
