"""Pixel similarity (docs/scoring.md), defined with the grids in arc_pipeline/domain/similarity.py because
the refinement prompt's feedback quotes it too; scoring's name for it stays here."""

from arc_pipeline.domain.similarity import max_overlap_matches, pixel_similarity

__all__ = ["max_overlap_matches", "pixel_similarity"]
