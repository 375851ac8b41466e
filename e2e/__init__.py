"""End to end on a real inference server (`make e2e`)."""
