"""Reaching guardians: finding, starting and validating them, health, lineage, trees."""
