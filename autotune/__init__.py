"""autotune: a cudnn.benchmark-style dispatcher over convalgos (being written)."""
