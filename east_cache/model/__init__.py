"""The model side: EAST, its loss, training engine, decoding of output maps to quads, and DetEval."""
