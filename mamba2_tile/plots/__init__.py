"""Pictures for the notebooks, one module per topic (masks, memory, tiles, timings...)."""
