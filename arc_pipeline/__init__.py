"""arc-pipeline: multi-turn RL for the BARC induction model on ARC, as a Snakemake workflow."""

__version__ = "0.1.0"
