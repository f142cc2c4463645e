"""Sorting: the stable argsort along the last axis (bitonic within a workgroup, then merges)."""
