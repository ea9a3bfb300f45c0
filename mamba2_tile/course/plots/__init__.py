"""Pictures for the notebooks, one module per topic (masks, sequence_memory, tiles, timings...)."""
