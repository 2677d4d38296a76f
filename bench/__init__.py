"""reasonwire's benchmarks (issue 8): ``make bench`` runs ``python -m bench``; see docs/benchmarks.md."""
